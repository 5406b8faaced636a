//! TIDE's `Predict` path: the delayed rating stream (Arena B). The same
//! three credits as in generation on a rating decision, then the same
//! candidate operations and GovernAndSelect_B ([`super::evolve`])
//! (`tide-recommendation-feedback-evolves-memory`, §3 and the
//! delayed-feedback experiment):
//!
//! - **Memories.** Per user (namespace `user:<token>`), guidelines of the form
//!   "this user rates genre G about +x stars away from their matched-control
//!   baseline": decisions genre → offset (`{"Drama": "+0.800"}`; a crossover
//!   decides several genres), conditions on the item's context
//!   ([`PREDICT_CONTEXT`]: release era, item bias), fitness evidence (error
//!   reduction, overall and per context value), drift evidence, the recent
//!   evidence items, version and status.
//! - **Decision.** The frozen estimator: baseline b(u, i) = μ + b_u + b_i,
//!   the one estimator every method of the delayed arena uses
//!   ([`evomem_kit::rating`]: global mean, shrunk item bias λ = 10, shrunk
//!   user offset λ = 5, prior 3.0), plus the mean offset of the user's
//!   guidelines that apply to the item (they decide one of its genres and
//!   their conditions hold: those are *used*; the others are retrieved but
//!   unused), clamped to 1–5. With `edit=none` no guideline is ever written
//!   and the estimate is the baseline alone, so TIDE's gain over it is what
//!   evolution adds.
//! - **Temporal credit.** A label counts only once it has matured (it
//!   arrives as feedback with `Outcome::value`); a guideline whose version
//!   changed between decision and label is not comparable and gets no credit.
//! - **Semantic credit.** Matched controls are the user's other matured
//!   ratings and the item's (the baseline); z_sem = 0 while the user has
//!   fewer than `min_controls` matured ratings at decision time. Fitness of
//!   a guideline is the error reduction it brought relative to the controls,
//!   |y − est₋ₘ| − |y − est|; its drift is y − est₋ₘ − (its offset), how far
//!   its offset is off. The evidence item e = (d, c, s): d the genre
//!   decision, c the item's context, s the direction and the numbers.
//! - **Responsibility.** Used (the trace; `trace=false`: every retrieved
//!   guideline) ∧ Align (it decides one of the item's genres and applies in
//!   the item's context) ∧ CF (leave-one-out replay of the estimate moves
//!   it by at least `cf_eps`; `cf=false` skips the test). κ = 2 when no
//!   guideline of the user's whole memory covers any genre of the item: the
//!   residual y − b goes to per-(user, genre) novelty evidence, which
//!   becomes a parentless provisional candidate once it has `novel_min`
//!   labels, |mean| ≥ `novel_offset` and |mean| ≥ 2 se.
//! - **Candidates and governance** ([`super::evolve`]): narrow and split on
//!   the context evidence; revise (a provisional candidate with the offset
//!   refitted, replacing its parent) when the mean drift exceeds
//!   `revise_gap` after `promote_n` credits; crossover of two supported
//!   genre guidelines credited on the same item; abstraction every
//!   `abstract_every` of the user's matured ratings over the last
//!   `abstract_window`; then GovernAndSelect_B with validity, duplicates and
//!   conflicts (offsets within `revise_gap` are the same decision), expiry
//!   after `expire_after` of the user's own decisions without use, and
//!   capacity B per user. `edit=append` only adds candidates.
//!
//! Recall reads only the user's namespace and never calls a role, so it
//! stays fast (ml-100k is 100k predictions); the candidate writer is called
//! only when a candidate is made.

use super::evolve::{direction_of, Counts, CreditedGuideline, Evolver};
use super::guideline::{
    fields, offset_for, offset_value, str_map, EvidenceRecord, Guideline, Mode, Stats,
    PREDICT_CONTEXT,
};
use super::roles::{WriteInput, WriteRole};
use super::{Attribution, Edit, TideConfig};
use evomem_core::{
    ContextEntry, DecisionContext, DecisionQuery, Feedback, Item, ItemId, LogicalTime, MemoryId,
    MemoryOp, Namespace, PlannedOp, PolicyCtx, PolicyError, Recall, RecordKind, UsageTrace,
    UsedMemory, UserId,
};
use evomem_kit::rating::GlobalStats;
use evomem_kit::RoleCaller;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Rating scale.
const LO: f64 = evomem_kit::rating::SCALE.0;
const HI: f64 = evomem_kit::rating::SCALE.1;

/// One retrieved guideline as the decision saw it.
#[derive(Debug, Clone)]
struct Seen {
    id: MemoryId,
    /// The offset it added (0 when it does not apply).
    offset: f64,
    version: u64,
    /// It applies to the item (decides one of its genres, conditions hold).
    applies: bool,
    /// Its decisions on the item's genres.
    decision: BTreeMap<String, String>,
}

/// What a decision looked like, kept until its label matures (the frozen
/// inputs of the leave-one-out replay).
#[derive(Debug, Clone)]
struct Snapshot {
    item: ItemId,
    genres: Vec<String>,
    context: BTreeMap<String, String>,
    baseline: f64,
    estimate: f64,
    seen: Vec<Seen>,
    controls: u64,
    /// The user's decision count at decision time (the usage clock).
    clock: u64,
}

/// Derived state of the predict path (rebuilt from what the policy saw).
#[derive(Debug, Default)]
pub(super) struct PredictState {
    /// μ and b_i over every matured label (the shared estimator).
    global: GlobalStats,
    /// Per user: matured (item, rating) labels, for b_u.
    users: BTreeMap<u32, Vec<(ItemId, f64)>>,
    seen: BTreeSet<(u32, u32)>,
    novelty: BTreeMap<(u32, String), Stats>,
    pending: BTreeMap<u64, Snapshot>,
    /// Per user: decisions made (the usage clock of expiry).
    clock: BTreeMap<u32, u64>,
    /// Per user: matured, credited-or-not records past C_sem.
    matured: BTreeMap<u32, u64>,
    /// Per user: contexts of the last `abstract_window` valid records (H_t).
    recent: BTreeMap<u32, VecDeque<BTreeMap<String, String>>>,
    counts: Counts,
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

/// The release decade of an item (`1990s`), from its `release_year` (or
/// `year`) attribute.
fn era(item: &Item) -> Option<String> {
    let y: i64 = ["release_year", "year"]
        .iter()
        .find_map(|k| item.attributes.get(*k))?
        .trim()
        .parse()
        .ok()?;
    Some(format!("{}s", y - y.rem_euclid(10)))
}

impl PredictState {
    fn bump(&mut self, k: &'static str) {
        *self.counts.entry(k).or_insert(0) += 1;
    }

    pub(super) fn stats(&self) -> Value {
        json!({ "counts": self.counts })
    }

    fn global_mean(&self) -> f64 {
        self.global.mean()
    }

    /// b(u, i) = μ + b_u + b_i ([`evomem_kit::rating`]).
    fn baseline(&self, user: UserId, item: ItemId) -> f64 {
        let labels = self.users.get(&user.0).map(Vec::as_slice).unwrap_or(&[]);
        let offset = self.global.user_offset(labels.iter().copied());
        self.global.predict(offset, item)
    }

    /// The context c of a rating decision on `item` ([`PREDICT_CONTEXT`]).
    fn context(&self, ctx: &PolicyCtx<'_>, item: ItemId) -> BTreeMap<String, String> {
        let mut c = BTreeMap::new();
        if let Some(e) = ctx.catalog.get(item).and_then(era) {
            c.insert(PREDICT_CONTEXT[0].to_string(), e);
        }
        let (sum, n) = self.global.item_total(item);
        let bias = if n == 0 {
            "none"
        } else if sum >= f64::from(n) * self.global_mean() {
            "above"
        } else {
            "below"
        };
        c.insert(PREDICT_CONTEXT[1].to_string(), bias.to_string());
        c
    }

    /// Add a matured label to the control log (once per user and item).
    pub(super) fn record_label(&mut self, user: UserId, item: ItemId, y: f64) {
        if !self.seen.insert((user.0, item.0)) {
            return;
        }
        self.global.add(item, y);
        self.users.entry(user.0).or_default().push((item, y));
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
        let context = self.context(ctx, item);
        let baseline = self.baseline(q.user, item);
        let clock = {
            let c = self.clock.entry(q.user.0).or_insert(0);
            *c += 1;
            *c
        };
        // A light read (decisions, conditions, version): recall runs once
        // per rating and never needs the evidence.
        let mut seen: Vec<(Seen, String)> = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter(|r| r.field_str(fields::MODE) == Some("predict"))
            .map(|r| {
                let decisions = str_map(r.fields.get(fields::DECISIONS));
                let conditions = str_map(r.fields.get(fields::CONDITIONS));
                let holds = conditions
                    .iter()
                    .all(|(k, v)| context.get(k).is_some_and(|c| c == v));
                let offset = offset_for(&decisions, &genres).filter(|_| holds);
                let decision = decisions
                    .into_iter()
                    .filter(|(g, _)| genres.contains(g))
                    .collect();
                (
                    Seen {
                        id: r.id.clone(),
                        offset: offset.unwrap_or(0.0),
                        version: r
                            .fields
                            .get(fields::VERSION)
                            .and_then(Value::as_u64)
                            .unwrap_or(1),
                        applies: offset.is_some(),
                        decision,
                    },
                    r.text.clone(),
                )
            })
            .collect();
        // Applicable guidelines first, then the strongest offsets.
        seen.sort_by(|a, b| {
            b.0.applies
                .cmp(&a.0.applies)
                .then(b.0.offset.abs().total_cmp(&a.0.offset.abs()))
                .then(a.0.id.cmp(&b.0.id))
        });
        seen.truncate(cfg.k_ret.max(1));
        let est = estimate(
            baseline,
            seen.iter().filter(|s| s.0.applies).map(|s| s.0.offset),
        );
        let mut trace = UsageTrace::for_query(q);
        let mut entries = Vec::with_capacity(seen.len());
        for (s, text) in &seen {
            if s.applies {
                trace.used.push(UsedMemory {
                    id: s.id.clone(),
                    weight: s.offset as f32,
                });
            }
            entries.push(ContextEntry {
                memory: Some(s.id.clone()),
                item: Some(item),
                text: text.clone(),
                weight: if s.applies { s.offset as f32 } else { 0.0 },
                embedding: None,
                path: None,
            });
        }
        let controls = self.users.get(&q.user.0).map_or(0, |u| u.len() as u64);
        self.pending.insert(
            q.decision_id,
            Snapshot {
                item,
                genres,
                context,
                baseline,
                estimate: est,
                seen: seen.into_iter().map(|s| s.0).collect(),
                controls,
                clock,
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
            self.bump("unmatched_feedback");
            return Ok(Vec::new());
        };
        if cfg.edit == Edit::None {
            return Ok(Vec::new());
        }
        // C_sem: enough matched controls at decision time.
        if snap.controls < cfg.min_controls as u64 {
            return Ok(Vec::new());
        }
        let token = ctx.user_token(user);
        let l = Labelled {
            cfg,
            ctx,
            fb,
            snap: &snap,
            user,
            y,
            ns: Namespace::user(&token),
            token: &token,
            at: fb.observed_at,
        };
        let (mut ops, credited, marks) = self.credit(caller, &l)?;
        if credited.is_empty() && cfg.attribution == Attribution::Tide && !covered(&l) {
            self.propose_novel(caller, &l, &mut ops)?;
        }
        if cfg.edit == Edit::Evolve {
            ops.extend(marks.into_iter().map(|id| usage_mark(id, snap.clock)));
            if cfg.attribution == Attribution::Tide {
                let gone: BTreeSet<MemoryId> = ops
                    .iter()
                    .filter(|o| matches!(o.op, MemoryOp::Forget { .. }))
                    .map(|o| o.op.target().clone())
                    .collect();
                let more = self.evolver(cfg, &l.ns, &token).crossover(
                    caller,
                    ctx,
                    &credited,
                    &gone,
                    l.at,
                    snap.clock,
                )?;
                ops.extend(more);
            }
            self.abstract_periodically(caller, &l, &mut ops)?;
            ops = self
                .evolver(cfg, &l.ns, &token)
                .govern(ctx, ops, snap.clock);
        }
        let sources = vec![fb.decided_at, fb.observed_at];
        Ok(ops
            .into_iter()
            .map(|o| o.with_sources(sources.clone()))
            .collect())
    }

    /// Responsibility and credit over the guidelines the decision saw: a
    /// comparable one (same version) is credited when it was used (the
    /// trace), applies, and leaving it out moves the estimate by `cf_eps`
    /// (`attribution=retrieved`: every one). Returns the credit ops (with
    /// each credited guideline's edits under `edit=evolve`), the credited
    /// guidelines, and the used but uncredited ones to mark.
    #[allow(clippy::type_complexity)]
    fn credit(
        &mut self,
        caller: &mut RoleCaller,
        l: &Labelled<'_, '_>,
    ) -> Result<(Vec<PlannedOp>, Vec<CreditedGuideline>, Vec<MemoryId>), PolicyError> {
        let (cfg, snap) = (l.cfg, l.snap);
        let traced: BTreeSet<&MemoryId> = l.fb.trace.used.iter().map(|u| &u.id).collect();
        let used_est = |skip: Option<&MemoryId>| {
            estimate(
                snap.baseline,
                snap.seen
                    .iter()
                    .filter(|s| s.applies && Some(&s.id) != skip)
                    .map(|s| s.offset),
            )
        };
        let mut ops = Vec::new();
        let mut credited: Vec<CreditedGuideline> = Vec::new();
        let mut marks: Vec<MemoryId> = Vec::new();
        for s in &snap.seen {
            let Some(mut g) = l.ctx.memory.get(&s.id).and_then(Guideline::read) else {
                continue;
            };
            if g.version != s.version {
                continue; // not comparable: revised since the decision
            }
            let used = !cfg.trace || traced.contains(&s.id);
            let without = used_est(Some(&s.id));
            let cf = (without - snap.estimate).abs() >= cfg.cf_eps;
            let responsible = match cfg.attribution {
                Attribution::Retrieved => true,
                Attribution::Tide => used && s.applies && (cf || !cfg.cf),
            };
            if !responsible {
                if used && s.applies {
                    marks.push(s.id.clone());
                }
                continue;
            }
            self.bump("credits");
            let fit = (l.y - without).abs() - (l.y - snap.estimate).abs();
            credit_guideline(&mut g, l, s, fit, l.y - without - s.offset);
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: g.id.clone(),
                    fields: g.evidence_fields(),
                    text: None,
                    embedding: None,
                },
                "credit",
                format!(
                    "responsible for decision {} (used, aligned with {}, leave-one-out moves the estimate {:.2} -> {:.2}); error reduction {fit:+.3}",
                    l.fb.decision_id,
                    s.decision.keys().cloned().collect::<Vec<_>>().join("+"),
                    snap.estimate,
                    without
                ),
            ));
            credited.push(CreditedGuideline {
                id: g.id.clone(),
                supported: fit > 0.0,
            });
            if cfg.edit == Edit::Evolve {
                ops.extend(self.evolver(cfg, &l.ns, l.token).edit(
                    caller,
                    l.ctx,
                    &g,
                    l.at,
                    snap.clock,
                )?);
            }
        }
        Ok((ops, credited, marks))
    }

    /// κ = 2 novelty per genre of the item: the residual from the baseline
    /// accumulates, and a confirmed one becomes a candidate.
    fn propose_novel(
        &mut self,
        caller: &mut RoleCaller,
        l: &Labelled<'_, '_>,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
        let cfg = l.cfg;
        let r = l.y - l.snap.baseline;
        for genre in &l.snap.genres {
            let st = self.novelty.entry((l.user.0, genre.clone())).or_default();
            st.push(r);
            let st = *st;
            if st.n >= cfg.novel_min
                && st.mean.abs() >= cfg.novel_offset
                && st.mean.abs() >= 2.0 * st.se(cfg.se_floor_predict)
            {
                self.novelty.remove(&(l.user.0, genre.clone()));
                ops.push(self.novel(caller, l, genre, &st)?);
            }
        }
        Ok(())
    }

    /// Every `abstract_every` matured labels of the user, abstraction over
    /// their last `abstract_window` contexts.
    fn abstract_periodically(
        &mut self,
        caller: &mut RoleCaller,
        l: &Labelled<'_, '_>,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
        let user = l.user.0;
        let n = {
            let m = self.matured.entry(user).or_insert(0);
            *m += 1;
            *m
        };
        let recent = self.recent.entry(user).or_default();
        recent.push_back(l.snap.context.clone());
        while recent.len() > l.cfg.abstract_window {
            recent.pop_front();
        }
        if n.checked_rem(l.cfg.abstract_every) == Some(0) {
            let recent = self.recent.remove(&user).unwrap_or_default();
            let window: Vec<&BTreeMap<String, String>> = recent.iter().collect();
            let more = self.evolver(l.cfg, &l.ns, l.token).abstraction(
                caller,
                l.ctx,
                &window,
                ops,
                l.at,
                l.snap.clock,
            );
            self.recent.insert(user, recent);
            ops.extend(more?);
        }
        Ok(())
    }

    /// The shared candidate operations over one user's namespace.
    fn evolver<'a>(
        &'a mut self,
        cfg: &'a TideConfig,
        ns: &Namespace,
        token: &'a str,
    ) -> Evolver<'a> {
        Evolver {
            cfg,
            mode: Mode::Predict,
            ns: ns.clone(),
            prefix: format!("tide:{token}"),
            token: Some(token),
            counts: &mut self.counts,
        }
    }

    /// A parentless provisional candidate for `genre` (κ = 2, confirmed);
    /// GovernAndSelect_B decides whether it stays.
    fn novel(
        &mut self,
        caller: &mut RoleCaller,
        l: &Labelled<'_, '_>,
        genre: &str,
        st: &Stats,
    ) -> Result<PlannedOp, PolicyError> {
        let (cfg, ns, token, at, clock) = (l.cfg, &l.ns, l.token, l.at, l.snap.clock);
        let n = st.n as f64;
        let offset = (st.mean * n / (n + cfg.shrink)).clamp(-4.0, 4.0);
        let decisions = BTreeMap::from([(genre.to_string(), offset_value(offset))]);
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
            MemoryId::new(format!("tide:{token}:genre:{genre}@{}", at.0)),
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
        g.last_used = clock;
        self.bump("novel");
        Ok(PlannedOp::new(
            MemoryOp::Create {
                record: g.record(ns.clone()),
            },
            "candidate",
            format!(
                "confirmed novel evidence (kappa=2): {} ratings of {genre}, mean residual {:+.2}",
                st.n, st.mean
            ),
        ))
    }
}


/// One matured label and the decision it belongs to, shared by the steps
/// of [`PredictState::feedback`].
struct Labelled<'a, 'c> {
    cfg: &'a TideConfig,
    ctx: &'a PolicyCtx<'c>,
    fb: &'a Feedback,
    snap: &'a Snapshot,
    user: UserId,
    /// The label.
    y: f64,
    /// The user's namespace and token.
    ns: Namespace,
    token: &'a str,
    /// When the label was observed.
    at: LogicalTime,
}

/// Whether a guideline of the user's whole memory already covers a genre
/// of the item where it applies (then no κ = 2 novelty).
fn covered(l: &Labelled<'_, '_>) -> bool {
    l.ctx
        .memory
        .scan_kind(std::slice::from_ref(&l.ns), &RecordKind::Guideline)
        .filter_map(Guideline::read)
        .any(|g| {
            g.mode == Mode::Predict
                && g.applies(&l.snap.context)
                && g.offset_for(&l.snap.genres).is_some()
        })
}

/// Add one credit to `g`: its error reduction `fit` and offset `drift`,
/// overall and per context value, and the evidence item.
fn credit_guideline(g: &mut Guideline, l: &Labelled<'_, '_>, s: &Seen, fit: f64, drift: f64) {
    g.fitness.entry("error".into()).or_default().push(fit);
    g.residual.push(drift);
    for (k, v) in &l.snap.context {
        let kv = format!("{k}={v}");
        g.by_context.entry(kv.clone()).or_default().push(fit);
        g.residual_by_context.entry(kv).or_default().push(drift);
    }
    g.keep_evidence(
        EvidenceRecord {
            decision: s.decision.clone(),
            context: l.snap.context.clone(),
            direction: direction_of(fit),
            objectives: BTreeMap::from([
                ("error".to_string(), (fit, 0.0)),
                ("drift".to_string(), (drift, 0.0)),
            ]),
            controls: l.snap.controls as usize,
            source: l.fb.decision_id,
        },
        l.cfg.evidence_keep,
    );
    g.last_used = g.last_used.max(l.snap.clock);
}

/// The op that records a use (for expiration) of a guideline that was used
/// but not credited.
fn usage_mark(id: MemoryId, clock: u64) -> PlannedOp {
    PlannedOp::new(
        MemoryOp::UpdateFields {
            id,
            fields: BTreeMap::from([(fields::LAST_USED.to_string(), json!(clock))]),
            text: None,
            embedding: None,
        },
        "use",
        "used by the estimate (usage trace)",
    )
}

#[cfg(test)]
mod tests {
    //! The Predict path through the shared candidate operations: a drifting
    //! guideline is revised into a provisional candidate (never rewritten in
    //! place), credited guidelines keep bounded evidence items with their
    //! context, and capacity goes through GovernAndSelect_B.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::super::Tide;
    use super::*;
    use evomem_core::{Catalog, DecisionKind, MemoryState, Outcome, Policy, RecordStatus, User};
    use evomem_llm::LlmHub;
    use std::sync::Arc;

    struct World {
        memory: MemoryState,
        catalog: Catalog,
        users: Vec<User>,
    }

    impl World {
        fn new() -> Self {
            let items = (0..40)
                .map(|i| Item {
                    id: ItemId(i),
                    token: format!("i{i}"),
                    title: format!("item {i}"),
                    text: BTreeMap::new(),
                    categories: vec![if i % 2 == 0 { "Drama" } else { "Comedy" }.to_string()],
                    attributes: BTreeMap::from([(
                        "release_year".to_string(),
                        if i % 4 == 0 { "1995" } else { "1975" }.to_string(),
                    )]),
                })
                .collect();
            Self {
                memory: MemoryState::new(),
                catalog: Catalog { items },
                users: vec![User {
                    id: UserId(0),
                    token: "u0".into(),
                    attributes: BTreeMap::new(),
                }],
            }
        }
        fn ctx(&self, t: u64) -> PolicyCtx<'_> {
            PolicyCtx {
                memory: &self.memory,
                catalog: &self.catalog,
                users: &self.users,
                now: LogicalTime(t),
            }
        }
    }

    fn tide(cfg: TideConfig) -> Tide {
        Tide::new(cfg, RoleCaller::new(Arc::new(LlmHub::offline())))
    }

    /// Predict item `k % 40` at step `t`, reveal `rating(item)` right away.
    fn stream(
        p: &mut Tide,
        w: &mut World,
        from: u64,
        n: u64,
        rating: impl Fn(u32) -> f64,
    ) -> Vec<PlannedOp> {
        let mut all = Vec::new();
        for t in from..from + n {
            let item = (t % 40) as u32;
            let q = DecisionQuery {
                decision_id: t,
                user: UserId(0),
                at: LogicalTime(t),
                instruction: None,
                kind: DecisionKind::Predict { item: ItemId(item) },
            };
            let r = p.recall(&w.ctx(t), &q).unwrap();
            let y = rating(item);
            let fb = Feedback {
                decision_id: t,
                user: Some(UserId(0)),
                decided_at: LogicalTime(t),
                observed_at: LogicalTime(t + 1),
                outcome: Outcome {
                    reward: 0.0,
                    item: Some(ItemId(item)),
                    value: Some(y),
                    ..Outcome::default()
                },
                trace: r.trace,
            };
            let ops = p.feedback(&w.ctx(t + 1), &fb).unwrap();
            for o in &ops {
                w.memory.apply(&o.op, LogicalTime(t + 1)).unwrap();
            }
            all.extend(ops);
        }
        all
    }

    fn guidelines(w: &World) -> Vec<Guideline> {
        w.memory
            .scan_kind(&[Namespace::user("u0")], &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .collect()
    }

    #[test]
    fn a_drifting_guideline_is_revised_into_a_provisional_candidate_that_replaces_it() {
        let mut p = tide(TideConfig::defaults().unwrap());
        let mut w = World::new();
        stream(
            &mut p,
            &mut w,
            0,
            40,
            |i| if i % 2 == 0 { 5.0 } else { 3.0 },
        );
        let before = guidelines(&w);
        let drama = before
            .iter()
            .find(|g| g.decisions.contains_key("Drama"))
            .expect("a Drama guideline")
            .clone();
        // Dramas now rate 1: the guideline's offset drifts far off.
        let ops = stream(
            &mut p,
            &mut w,
            40,
            40,
            |i| if i % 2 == 0 { 1.0 } else { 3.0 },
        );
        // Never rewritten in place: no text update, no offset update.
        assert!(ops.iter().all(
            |o| !matches!(&o.op, MemoryOp::UpdateFields { text: Some(_), .. })
                && !matches!(
                    &o.op,
                    MemoryOp::UpdateFields { fields, .. } if fields.contains_key(fields::DECISIONS)
                )
        ));
        let create = ops
            .iter()
            .find_map(|o| match &o.op {
                MemoryOp::Create { record } if o.label == "revise" => Guideline::read(record),
                _ => None,
            })
            .expect("a revised candidate");
        assert_eq!(create.status, RecordStatus::Provisional);
        assert_eq!(create.parents, vec![drama.id.as_str().to_string()]);
        assert!(create.version > drama.version);
        assert!(ops.iter().any(|o| o.label == "revise"
            && o.op
                == MemoryOp::Forget {
                    id: drama.id.clone()
                }));
    }

    #[test]
    fn credited_guidelines_keep_bounded_evidence_items_with_their_context() {
        let mut p = tide(TideConfig {
            evidence_keep: 3,
            ..TideConfig::defaults().unwrap()
        });
        let mut w = World::new();
        stream(
            &mut p,
            &mut w,
            0,
            80,
            |i| if i % 2 == 0 { 5.0 } else { 3.0 },
        );
        let gs = guidelines(&w);
        let g = gs
            .iter()
            .find(|g| g.primary().n >= 3)
            .expect("a credited guideline");
        assert_eq!(g.evidence.len(), 3, "{:?}", g.evidence);
        for e in &g.evidence {
            assert!(e.context.contains_key("era") && e.context.contains_key("item_bias"));
            assert!(e.decision.keys().all(|k| g.decisions.contains_key(k)));
            assert!(e.objectives.contains_key("error"));
        }
        // Oldest first, most recent kept.
        assert!(g.evidence.windows(2).all(|w| w[0].source < w[1].source));
    }

    #[test]
    fn capacity_is_governed_provisional_candidates_go_before_incumbents() {
        // Three genres, capacity 1: GovernAndSelect_B keeps one guideline.
        let mut p = tide(TideConfig {
            capacity: 1,
            ..TideConfig::defaults().unwrap()
        });
        let mut w = World::new();
        w.catalog.items.iter_mut().for_each(|it| {
            if it.id.0 % 3 == 0 {
                it.categories = vec!["Horror".into()];
            }
        });
        let ops = stream(&mut p, &mut w, 0, 120, |i| match i % 3 {
            0 => 1.0,
            _ if i % 2 == 0 => 5.0,
            _ => 3.0,
        });
        assert!(guidelines(&w).len() <= 1, "{:?}", guidelines(&w));
        assert!(ops
            .iter()
            .any(|o| o.label == "evict" && o.reason.contains("capacity")));
    }
}
