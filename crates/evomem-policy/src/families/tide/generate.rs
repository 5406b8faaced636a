//! TIDE's `Generate` path (Algorithm 1 of
//! `tide-recommendation-feedback-evolves-memory`): recall guidelines for a
//! generation request, then, per material, temporal credit → semantic
//! credit → responsibility → candidates → GovernAndSelect_B.
//!
//! **Protocol with the arena.** Guidelines live in the namespace
//! [`NAMESPACE`]. `recall` returns the applicable guidelines (conditions
//! hold for the request), most specific first, at most `k_ret`; the arena's
//! frozen generator ([`super::generator`]) composes the material from them
//! and its usage trace comes back in every feedback's `trace`. Feedback is
//! staged: one [`Feedback`] per lifecycle window with `Outcome::stage`, the
//! counts and the delivery context in `objectives` ([`super::temporal`]),
//! and the request and material text in `Outcome::episode` (`task`,
//! `answer`). Control traffic (request attribute [`BUCKET`] =
//! [`CONTROL_BUCKET`], no recall, empty trace) is only logged, as matched
//! controls.
//!
//! **Per matured record** (z_temp = 1):
//!
//! 1. the rubric role reads the material's content decisions;
//! 2. the record joins the log; C_sem ([`super::semantic`]) and the
//!    evidence-chain role give z_sem and the items e_i = (d, c, s);
//! 3. responsibility per item with a direction: z_resp(m) = Used(G_i) ∧
//!    Align(m, e_i) ∧ CF(m), three separate tests. Used: the trace, which
//!    names every guideline the generator took up, the overruled ones too
//!    (`trace=false`: every retrieved guideline). Align: the alignment
//!    role; a guideline is linked to the item's decision when it speaks to
//!    the item's dimension where it applies, whatever value it prescribes.
//!    CF: regenerate with the frozen generator at temperature 0 from what
//!    went into the material (the traced guidelines; `trace=false`: the
//!    retrieved set), once with and once without m; the decision changes
//!    when the two replays' values on the item's dimension differ. With the
//!    trace the replay with m is the material's own decision; without it,
//!    a retrieved guideline the live generator skipped binds in the replay
//!    and can take the credit (what the paper's trace ablation loses). So only
//!    CF separates the pivotal guideline from one that was used and linked
//!    but overruled or redundant; `cf=false` skips it and holds every used,
//!    aligned guideline responsible, as the paper's ablation does: an
//!    overruled guideline then collects the fitness of the decision that
//!    overruled it. `attribution=retrieved` credits every retrieved
//!    guideline with the material's fitness instead;
//! 4. κ = 1: each responsible guideline accumulates the item's contrast per
//!    objective (and per context value), gathered under one recommender
//!    version: after a version change the old evidence is archived and the
//!    guideline is judged afresh; κ = 2: a supported decision that no
//!    retrieved guideline prescribes accumulates novelty evidence under its
//!    (product, audience), and after `novel_min` supported records becomes a
//!    parentless provisional candidate; κ = 0: no feedback-driven update;
//! 5. candidates from a credited guideline. It is edited only when its
//!    evidence says removing it improves utility: overall (mean + se < 0
//!    after `evict_n` credits), or in one context value of an attribute
//!    (same test on that value's evidence) while another value of the same
//!    attribute is significantly positive (mean − se > 0, n ≥ 2). It is then
//!    *narrowed* to the context value where its evidence is positive (in the
//!    second case: a value of that attribute), *split* when another value of
//!    that attribute is significantly negative (the second child prescribes
//!    the prior there), else (overall negative, nowhere positive) evicted.
//!    The per-context trigger lets an over-broad guideline whose wins in one
//!    audience balance its losses elsewhere still be narrowed. A narrowing
//!    that would contradict a live guideline (same conditions, another
//!    value) cannot be placed (governance rejects it): the guideline is then
//!    evicted only when its overall evidence is negative, else kept (its
//!    evidence says it helps somewhere, and nothing can replace it there);
//!    with positive
//!    evidence a provisional candidate is promoted, and a guideline whose
//!    wording is tentative (the generator's hedge words) is *revised*: the
//!    writer restates it firmly as a provisional candidate that inherits
//!    its evidence and replaces it (`restate`, default on). So credit that
//!    lands on a memory the generator never used (no usage trace) makes
//!    that memory binding for future materials. Two responsible,
//!    promoted, supported guidelines on different dimensions with the same
//!    conditions cross over into one compound candidate, which retires them. Every
//!    `abstract_every` matured records, promoted narrowed siblings that
//!    cover every value of their attribute seen in the log are abstracted
//!    into a parent without it;
//! 6. GovernAndSelect_B: candidates must be valid (known decisions and
//!    attributes), are dropped as duplicates of a live guideline or when
//!    they conflict with one (same conditions and dimension, other value)
//!    that is not their parent; guidelines with no traced use for
//!    `expire_after` decisions expire; above capacity B the weakest go,
//!    provisional candidates before incumbents (score: mean − se of the
//!    primary fitness); a candidate that replaces a parent retired in the
//!    same step (narrow, split, crossover) takes its parent's place and
//!    competes as an incumbent. A parent whose every candidate was rejected
//!    as invalid or conflicting is not retired (its `Forget` is void), so a
//!    failed refinement never shrinks memory. Incumbents keep their
//!    evidence; candidates enter provisional with the evidence that
//!    motivated them.
//!
//! The credited set of a decision is exactly the targets of its `credit`
//! ops, which the arena reads to score responsibility.

use super::generator::{adherence, GenerateInput, GenerateOutput, GuidelineIn};
use super::guideline::{options, prior, Guideline, Mode, Stats, CONTEXT_ATTRIBUTES};
use super::roles::{
    AlignInput, AlignRole, Direction, EvidenceInput, EvidenceItem, EvidenceRole, GenerateRole,
    GuidelineView, RubricInput, RubricRole, WriteInput, WriteRole,
};
use super::semantic::{semantic_credit, Matured};
use super::temporal::{temporal_credit, Temporal, Window};
use super::{Attribution, Edit, TideConfig};
use evomem_core::{
    ContextEntry, DecisionContext, DecisionQuery, Feedback, LogicalTime, MemoryId, MemoryOp,
    MemoryRecord, Namespace, PlannedOp, PolicyCtx, PolicyError, Recall, RecordKind, RecordStatus,
    TaskRequest, UsageTrace, UsedMemory,
};
use evomem_kit::RoleCaller;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// The namespace of the generation guidelines.
pub const NAMESPACE: &str = "tide:generation";
/// Labels of the `Forget` ops that retire a parent in favour of its
/// candidates; such a forget is void when every candidate was rejected as
/// invalid or conflicting.
const REPLACING: [&str; 4] = ["narrow", "split", "crossover", "revise"];
/// Request attribute naming the traffic bucket of a request.
pub const BUCKET: &str = "bucket";
/// The bucket of control traffic (no memory; logged as controls).
pub const CONTROL_BUCKET: &str = "control";

/// The namespace of the generation guidelines.
pub fn namespace() -> Namespace {
    Namespace::new(NAMESPACE)
}

/// A guideline record as the generator reads it.
pub fn guideline_in(r: &MemoryRecord) -> Option<GuidelineIn> {
    let g = Guideline::read(r)?;
    (g.mode == Mode::Generate).then(|| GuidelineIn {
        id: g.id.as_str().to_string(),
        text: g.text.clone(),
        decisions: g.decisions.clone(),
        conditions: g.conditions.clone(),
        evidence: g.primary().mean,
        incumbent: g.status != RecordStatus::Provisional,
    })
}

/// The generator's input for `request` from retrieved guidelines.
pub fn generator_input(
    request: &TaskRequest,
    guidelines: Vec<GuidelineIn>,
    sample: Option<u64>,
) -> GenerateInput {
    GenerateInput {
        request_id: request.id.clone(),
        request_text: request.text.clone(),
        attributes: request.attributes.clone(),
        guidelines,
        sample,
    }
}

/// A seed guideline (an incumbent of the initial memory).
pub fn seed_record(
    id: &str,
    decisions: BTreeMap<String, String>,
    conditions: BTreeMap<String, String>,
    text: &str,
    at: LogicalTime,
) -> MemoryRecord {
    let mut g = Guideline::new(
        MemoryId::new(id),
        Mode::Generate,
        decisions,
        conditions,
        text.to_string(),
        "seed",
        at,
    );
    g.status = RecordStatus::Promoted;
    g.record(namespace())
}

/// Credited guidelines of one record: per guideline, the evidence items it
/// is responsible for (dimension, contrast per objective, direction).
type Credited = BTreeMap<MemoryId, Vec<(String, BTreeMap<String, (f64, f64)>, Direction)>>;

/// What a decision retrieved (the frozen inputs of the replay).
#[derive(Debug, Clone)]
struct Snap {
    retrieved: Vec<(GuidelineIn, u64)>,
}

/// A material whose lifecycle is still open.
#[derive(Debug, Clone)]
struct Open {
    request: TaskRequest,
    material: String,
    decided_at: LogicalTime,
    windows: Vec<Window>,
    traced: Vec<MemoryId>,
}

/// Derived state of the generate path.
#[derive(Debug, Default)]
pub(super) struct GenerateState {
    snaps: BTreeMap<u64, Snap>,
    open: BTreeMap<u64, Open>,
    log: Vec<Matured>,
    novelty: BTreeMap<String, Stats>,
    own_ctr: Stats,
    matured_own: u64,
    counts: BTreeMap<&'static str, u64>,
}

fn is_control(r: &TaskRequest) -> bool {
    r.attributes.get(BUCKET).map(String::as_str) == Some(CONTROL_BUCKET)
}

fn view(g: &GuidelineIn) -> GuidelineView {
    GuidelineView {
        id: g.id.clone(),
        decisions: g.decisions.clone(),
        conditions: g.conditions.clone(),
        text: g.text.clone(),
    }
}

fn lcb(s: &Stats) -> f64 {
    if s.n == 0 {
        0.0
    } else {
        s.mean - s.se(0.3)
    }
}

impl GenerateState {
    fn bump(&mut self, k: &'static str) {
        *self.counts.entry(k).or_insert(0) += 1;
    }

    pub(super) fn stats(&self) -> serde_json::Value {
        json!({
            "counts": self.counts,
            "logged": self.log.len(),
            "open": self.open.len(),
        })
    }

    pub(super) fn recall(
        &mut self,
        cfg: &TideConfig,
        ctx: &PolicyCtx<'_>,
        q: &DecisionQuery,
        request: &TaskRequest,
    ) -> Result<Recall, PolicyError> {
        let mut trace = UsageTrace::for_query(q);
        if is_control(request) {
            return Ok(Recall {
                context: DecisionContext::default(),
                trace,
            });
        }
        let ns = [namespace()];
        let mut gs: Vec<Guideline> = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .filter(|g| g.mode == Mode::Generate && g.applies(&request.attributes))
            .collect();
        gs.sort_by(|a, b| {
            b.specificity()
                .cmp(&a.specificity())
                .then(
                    (b.status != RecordStatus::Provisional)
                        .cmp(&(a.status != RecordStatus::Provisional)),
                )
                .then(b.primary().mean.total_cmp(&a.primary().mean))
                .then(a.id.cmp(&b.id))
        });
        gs.truncate(cfg.k_ret);
        let mut entries = Vec::with_capacity(gs.len());
        let mut retrieved = Vec::with_capacity(gs.len());
        for g in &gs {
            entries.push(ContextEntry {
                memory: Some(g.id.clone()),
                item: None,
                text: g.text.clone(),
                weight: g.primary().mean as f32,
                embedding: None,
                path: None,
            });
            trace.used.push(UsedMemory {
                id: g.id.clone(),
                weight: 1.0,
            });
            if let Some(r) = ctx.memory.get(&g.id) {
                if let Some(gi) = guideline_in(r) {
                    retrieved.push((gi, g.version));
                }
            }
        }
        self.snaps.insert(q.decision_id, Snap { retrieved });
        Ok(Recall {
            context: DecisionContext {
                entries,
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
        let Some(window) = Window::from_outcome(&fb.outcome, fb.observed_at) else {
            return Ok(Vec::new());
        };
        let ep = fb.outcome.episode.as_ref();
        let open = self.open.entry(fb.decision_id).or_insert_with(|| Open {
            request: ep.map(|e| e.task.clone()).unwrap_or_default(),
            material: ep.and_then(|e| e.answer.clone()).unwrap_or_default(),
            decided_at: fb.decided_at,
            windows: Vec::new(),
            traced: Vec::new(),
        });
        open.windows.push(window);
        if !fb.trace.used.is_empty() {
            open.traced = fb.trace.used.iter().map(|u| u.id.clone()).collect();
        }
        let summary = match temporal_credit(&open.windows, open.decided_at, cfg.maturity) {
            Temporal::Mature(u) => u,
            Temporal::Pending { broken, .. } => {
                if broken {
                    // Kept pending: no later window can make it comparable.
                    self.bump("pending_broken");
                }
                return Ok(Vec::new());
            }
        };
        let Some(open) = self.open.remove(&fb.decision_id) else {
            return Ok(Vec::new());
        };
        let snap = self.snaps.remove(&fb.decision_id);
        let decisions = caller
            .call(
                &RubricRole,
                &RubricInput {
                    material: open.material.clone(),
                },
                None,
            )?
            .decisions;
        let control = is_control(&open.request) || snap.is_none();
        let rec = Matured {
            decision_id: fb.decision_id,
            at: open.decided_at.0,
            context: open.request.attributes.clone(),
            env: summary.env,
            decisions,
            impressions: summary.impressions,
            clicks: summary.clicks,
            conversions: summary.conversions,
            control,
        };
        self.log.push(rec.clone());
        let Some(snap) = snap.filter(|_| !control) else {
            self.bump("controls_logged");
            return Ok(Vec::new());
        };
        self.bump("matured");
        self.matured_own += 1;
        let sources = vec![open.decided_at, fb.observed_at];
        match cfg.edit {
            Edit::None => Ok(Vec::new()),
            Edit::Append => self.append(caller, ctx, &rec, &open, sources),
            Edit::Evolve => self.evolve(cfg, caller, ctx, &rec, &open, &snap, sources),
        }
    }

    /// Append-only memory: a material whose raw CTR beats the running mean
    /// of the policy's own materials becomes a new guideline under its
    /// product and audience (exact duplicates skipped). No controls, no
    /// responsibility, no edits.
    fn append(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        rec: &Matured,
        open: &Open,
        sources: Vec<LogicalTime>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let ctr = rec.clicks / rec.impressions.max(1.0);
        let wins = self.own_ctr.n > 0 && ctr > self.own_ctr.mean;
        self.own_ctr.push(ctr);
        if !wins {
            return Ok(Vec::new());
        }
        let conditions: BTreeMap<String, String> = ["product", "audience"]
            .iter()
            .filter_map(|k| rec.context.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect();
        let ns = [namespace()];
        let dup = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .any(|g| g.decisions == rec.decisions && g.conditions == conditions);
        if dup {
            return Ok(Vec::new());
        }
        let text = caller
            .call(
                &WriteRole,
                &WriteInput {
                    operation: "append".into(),
                    decisions: rec.decisions.clone(),
                    conditions: conditions.clone(),
                    offset: None,
                    parents: Vec::new(),
                    evidence: format!("raw CTR {ctr:.4} above the running mean"),
                },
                None,
            )?
            .text;
        let mut g = Guideline::new(
            MemoryId::new(format!("tide:gen:append:{}", open.decided_at.0)),
            Mode::Generate,
            rec.decisions.clone(),
            conditions,
            text,
            "append",
            open.decided_at,
        );
        g.status = RecordStatus::Promoted;
        self.bump("appended");
        Ok(vec![PlannedOp::new(
            MemoryOp::Create {
                record: g.record(namespace()),
            },
            "append",
            "a winning material's decisions, appended".to_string(),
        )
        .with_sources(sources)])
    }

    fn replay(
        caller: &mut RoleCaller,
        request: &TaskRequest,
        guidelines: Vec<GuidelineIn>,
    ) -> Result<GenerateOutput, PolicyError> {
        caller.call(
            &GenerateRole,
            &super::generate::generator_input(request, guidelines, None),
            None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn evolve(
        &mut self,
        cfg: &TideConfig,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        rec: &Matured,
        open: &Open,
        snap: &Snap,
        sources: Vec<LogicalTime>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut ops = Vec::new();
        let mut touched: BTreeMap<MemoryId, Guideline> = BTreeMap::new();
        // Usage bookkeeping for expiration: the traced memories were used.
        let used_ids: BTreeSet<MemoryId> = if cfg.trace {
            open.traced.iter().cloned().collect()
        } else {
            snap.retrieved
                .iter()
                .map(|(g, _)| MemoryId::new(g.id.clone()))
                .collect()
        };
        for id in &used_ids {
            if let Some(mut g) = ctx.memory.get(id).and_then(Guideline::read) {
                g.last_used = g.last_used.max(open.decided_at.0);
                touched.insert(id.clone(), g);
            }
        }
        // C_sem.
        let sem = semantic_credit(&self.log, rec);
        let ev = caller.call(
            &EvidenceRole,
            &EvidenceInput {
                decisions: rec.decisions.clone(),
                context: rec.context.clone(),
                environment: sem.environment.clone(),
                controls: sem.controls,
                min_controls: cfg.min_controls,
                fitness: sem.fitness.clone(),
                contrasts: sem.contrasts.clone(),
                counterexamples: sem.counterexamples,
                agreeing: sem.agreeing,
                z_min: cfg.z_min,
            },
            None,
        )?;
        // Comparable retrieved guidelines: still live, same version.
        let comparable: Vec<&GuidelineIn> = snap
            .retrieved
            .iter()
            .filter(|(g, v)| {
                ctx.memory
                    .get(&MemoryId::new(g.id.clone()))
                    .and_then(Guideline::read)
                    .is_some_and(|cur| cur.version == *v)
            })
            .map(|(g, _)| g)
            .collect();
        let mut credited: Credited = BTreeMap::new();
        let mut kappa = 0u8;
        if ev.valid {
            let items: Vec<&EvidenceItem> = ev
                .items
                .iter()
                .filter(|i| i.direction != Direction::None)
                .collect();
            match cfg.attribution {
                Attribution::Retrieved => {
                    let dir = if sem.fitness.get("ctr").is_some_and(|f| f.0 > 0.0) {
                        Direction::Support
                    } else {
                        Direction::Counter
                    };
                    for g in &comparable {
                        credited
                            .entry(MemoryId::new(g.id.clone()))
                            .or_default()
                            .push(("material".into(), sem.fitness.clone(), dir));
                    }
                }
                Attribution::Tide => {
                    // The replay regenerates the material from what went
                    // into it: the traced guidelines (`trace=false`: every
                    // retrieved one), each binding at temperature 0.
                    let all: Vec<GuidelineIn> = snap
                        .retrieved
                        .iter()
                        .map(|(g, _)| g)
                        .filter(|g| {
                            !cfg.trace || open.traced.contains(&MemoryId::new(g.id.clone()))
                        })
                        .cloned()
                        .collect();
                    // Both sides of the leave-one-out comparison are
                    // deterministic replays: G(x, M) against G(x, M \ {m}).
                    // With the trace, G(x, M) is the material's own decision
                    // (the first traced guideline of each dimension decided
                    // it); without it, M is everything retrieved, and the
                    // replay may credit a memory the generator skipped.
                    let base = if cfg.cf && !items.is_empty() {
                        Some(Self::replay(caller, &open.request, all.clone())?)
                    } else {
                        None
                    };
                    let mut without: BTreeMap<String, GenerateOutput> = BTreeMap::new();
                    for item in &items {
                        for g in &comparable {
                            if !g.decisions.contains_key(&item.dimension) {
                                continue;
                            }
                            let id = MemoryId::new(g.id.clone());
                            let used = !cfg.trace || open.traced.contains(&id);
                            if !used {
                                continue;
                            }
                            let aligned = caller
                                .call(
                                    &AlignRole,
                                    &AlignInput {
                                        guideline: view(g),
                                        dimension: item.dimension.clone(),
                                        value: item.value.clone(),
                                        context: rec.context.clone(),
                                    },
                                    None,
                                )?
                                .aligned;
                            if !aligned {
                                continue;
                            }
                            let cf = if cfg.cf {
                                if !without.contains_key(&g.id) {
                                    let rest: Vec<GuidelineIn> =
                                        all.iter().filter(|o| o.id != g.id).cloned().collect();
                                    let out = Self::replay(caller, &open.request, rest)?;
                                    without.insert(g.id.clone(), out);
                                }
                                let base_value = base
                                    .as_ref()
                                    .and_then(|o| o.decisions.get(&item.dimension));
                                without
                                    .get(&g.id)
                                    .and_then(|o| o.decisions.get(&item.dimension))
                                    != base_value
                            } else {
                                true
                            };
                            if !cf {
                                continue;
                            }
                            let contrast = sem
                                .contrasts
                                .iter()
                                .find(|c| c.dimension == item.dimension)
                                .map(|c| c.objectives.clone())
                                .unwrap_or_default();
                            credited.entry(id).or_default().push((
                                item.dimension.clone(),
                                contrast,
                                item.direction,
                            ));
                        }
                    }
                    if credited.is_empty() {
                        // κ = 2: supported decisions no retrieved guideline prescribes.
                        for item in items.iter().filter(|i| i.direction == Direction::Support) {
                            let covered = snap.retrieved.iter().any(|(g, _)| {
                                g.decisions.get(&item.dimension) == Some(&item.value)
                            });
                            if covered {
                                continue;
                            }
                            kappa = 2;
                            let contrast = sem
                                .contrasts
                                .iter()
                                .find(|c| c.dimension == item.dimension)
                                .and_then(|c| c.objectives.get("ctr").copied())
                                .unwrap_or((0.0, 1.0));
                            if let Some(op) = self.novel(
                                cfg,
                                caller,
                                ctx,
                                rec,
                                item,
                                contrast.0,
                                open.decided_at,
                            )? {
                                ops.push(op.with_sources(sources.clone()));
                            }
                        }
                    }
                }
            }
        }
        if !credited.is_empty() {
            kappa = 1;
        }
        self.bump(match kappa {
            1 => "kappa1",
            2 => "kappa2",
            _ => "kappa0",
        });
        // Credit.
        for (id, items) in &credited {
            let Some(g) = touched
                .get(id)
                .cloned()
                .or_else(|| ctx.memory.get(id).and_then(Guideline::read))
            else {
                continue;
            };
            let mut g = g;
            if g.rec_version != rec.env.rec_version {
                // Evidence from another recommender version is not
                // comparable: archive it and start afresh.
                if g.rec_version != 0 {
                    for (k, v) in std::mem::take(&mut g.fitness) {
                        g.archive.entry(k).or_default().merge(&v);
                    }
                    g.by_context.clear();
                    self.bump("evidence_archived");
                }
                g.rec_version = rec.env.rec_version;
            }
            for (_, objectives, _) in items {
                for (obj, (e, _)) in objectives {
                    g.fitness.entry(obj.clone()).or_default().push(*e);
                }
                if let Some((e, _)) = objectives.get("ctr") {
                    for k in CONTEXT_ATTRIBUTES {
                        if let Some(v) = rec.context.get(k) {
                            g.by_context.entry(format!("{k}={v}")).or_default().push(*e);
                        }
                    }
                }
            }
            self.bump("credits");
            touched.remove(id);
            ops.push(
                PlannedOp::new(
                    MemoryOp::UpdateFields {
                        id: id.clone(),
                        fields: g.evidence_fields(),
                        text: None,
                        embedding: None,
                    },
                    "credit",
                    format!(
                        "responsible for decision {} ({}): {}",
                        rec.decision_id,
                        items
                            .iter()
                            .map(|(d, _, dir)| format!("{d} {dir:?}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        ev.reason
                    ),
                )
                .with_sources(sources.clone()),
            );
            ops.extend(
                self.edit(cfg, caller, ctx, &g, open.decided_at)?
                    .into_iter()
                    .map(|o| o.with_sources(sources.clone())),
            );
        }
        // Crossover of complementary responsible guidelines.
        if cfg.attribution == Attribution::Tide {
            let gone: BTreeSet<MemoryId> = ops
                .iter()
                .filter(|o| matches!(o.op, MemoryOp::Forget { .. }))
                .map(|o| o.op.target().clone())
                .collect();
            for op in self.crossover(caller, ctx, &credited, &gone, open.decided_at)? {
                ops.push(op.with_sources(sources.clone()));
            }
        }
        // Usage marks for the rest.
        for (id, g) in touched {
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id,
                    fields: BTreeMap::from([(
                        super::guideline::fields::LAST_USED.to_string(),
                        json!(g.last_used),
                    )]),
                    text: None,
                    embedding: None,
                },
                "use",
                "used by the generator (usage trace)",
            ));
        }
        if self.matured_own.checked_rem(cfg.abstract_every) == Some(0) {
            ops.extend(self.abstraction(caller, ctx, &ops, open.decided_at)?);
        }
        Ok(self.govern(cfg, ctx, ops, open.decided_at))
    }

    /// Narrow, split, evict or promote one credited guideline.
    fn edit(
        &mut self,
        cfg: &TideConfig,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        g: &Guideline,
        at: LogicalTime,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let p = g.primary();
        let mut ops = Vec::new();
        let attr_of = |k: &str| k.split('=').next().unwrap_or("").to_string();
        let negative = |s: &Stats| s.n >= cfg.evict_n && s.mean + s.se(0.3) < 0.0;
        // An attribute (not among the conditions) with one value where the
        // evidence is significantly negative and another where it is
        // significantly positive: removing the guideline improves utility
        // there, keeping it helps elsewhere.
        let mixed: Option<String> = g
            .by_context
            .iter()
            .filter(|(k, s)| !g.conditions.contains_key(&attr_of(k)) && negative(s))
            .find_map(|(k, _)| {
                let attr = attr_of(k);
                g.by_context
                    .iter()
                    .any(|(k2, s2)| k2 != k && attr_of(k2) == attr && s2.n >= 2 && lcb(s2) > 0.0)
                    .then_some(attr)
            });
        if negative(&p) || mixed.is_some() {
            let free: Vec<(&String, &Stats)> = g
                .by_context
                .iter()
                .filter(|(k, s)| {
                    let attr = attr_of(k);
                    s.n >= 2
                        && !g.conditions.contains_key(&attr)
                        && mixed.as_ref().is_none_or(|m| *m == attr)
                        && lcb(s) > 0.0
                })
                .collect();
            let best = free
                .iter()
                .max_by(|a, b| a.1.mean.total_cmp(&b.1.mean).then(b.0.cmp(a.0)))
                .copied();
            // A narrowing that contradicts a live guideline (same conditions,
            // another value on a shared dimension) cannot be placed:
            // GovernAndSelect rejects such a candidate. Then the guideline is
            // evicted only when its overall evidence says removing it
            // improves utility; otherwise it is kept as it is.
            let blocked = best.is_some_and(|(kv, _)| {
                let (attr, val) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
                let mut conditions = g.conditions.clone();
                conditions.insert(attr.to_string(), val.to_string());
                let ns = [namespace()];
                let conflict = ctx
                    .memory
                    .scan_kind(&ns, &RecordKind::Guideline)
                    .filter_map(Guideline::read)
                    .any(|o| {
                        o.id != g.id
                            && o.mode == Mode::Generate
                            && o.conditions == conditions
                            && o.decisions
                                .iter()
                                .any(|(d, v)| g.decisions.get(d).is_some_and(|gv| gv != v))
                    });
                conflict
            });
            if blocked {
                self.bump("narrow_blocked");
                if !negative(&p) {
                    return Ok(ops);
                }
            }
            let Some((kv, s)) = best.filter(|_| !blocked) else {
                self.bump("evicted");
                ops.push(PlannedOp::new(
                    MemoryOp::Forget { id: g.id.clone() },
                    "evict",
                    format!(
                        "fitness {:+.3} ± {:.3} over {} credits: removing it improves utility",
                        p.mean,
                        p.se(0.3),
                        p.n
                    ),
                ));
                return Ok(ops);
            };
            let (attr, val) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
            let mut conditions = g.conditions.clone();
            conditions.insert(attr.to_string(), val.to_string());
            let negative: Option<(String, Stats)> = g
                .by_context
                .iter()
                .filter(|(k, s)| {
                    k.starts_with(&format!("{attr}="))
                        && *k != kv
                        && s.n >= 2
                        && s.mean + s.se(0.3) < 0.0
                })
                .min_by(|a, b| a.1.mean.total_cmp(&b.1.mean))
                .map(|(k, s)| (k.clone(), *s));
            let label = if negative.is_some() {
                "split"
            } else {
                "narrow"
            };
            let mut children = vec![(g.decisions.clone(), conditions, *s, "narrow")];
            if let Some((nk, ns)) = negative {
                let nval = nk.split_once('=').map(|x| x.1).unwrap_or("");
                let revised: BTreeMap<String, String> = g
                    .decisions
                    .keys()
                    .map(|d| (d.clone(), prior(d).to_string()))
                    .collect();
                if revised != g.decisions {
                    let mut c = g.conditions.clone();
                    c.insert(attr.to_string(), nval.to_string());
                    let flipped = Stats {
                        mean: -ns.mean,
                        ..ns
                    };
                    children.push((revised, c, flipped, "revise"));
                }
            }
            for (i, (decisions, conditions, ev, how)) in children.into_iter().enumerate() {
                let text = caller
                    .call(
                        &WriteRole,
                        &WriteInput {
                            operation: how.into(),
                            decisions: decisions.clone(),
                            conditions: conditions.clone(),
                            offset: None,
                            parents: vec![g.line()],
                            evidence: format!(
                                "parent fitness {:+.3} overall (n={}), {:+.3} where {} (n={})",
                                p.mean, p.n, ev.mean, kv, ev.n
                            ),
                        },
                        None,
                    )?
                    .text;
                let mut c = Guideline::new(
                    MemoryId::new(format!("{}:{label}{}:{}", g.id, i, at.0)),
                    Mode::Generate,
                    decisions,
                    conditions,
                    text,
                    label,
                    at,
                );
                c.version = g.version + 1;
                c.parents = vec![g.id.as_str().to_string()];
                c.fitness.insert("ctr".into(), ev);
                c.last_used = at.0;
                self.bump(if i == 0 { "narrowed" } else { "revised" });
                ops.push(PlannedOp::new(
                    MemoryOp::Create {
                        record: c.record(namespace()),
                    },
                    label,
                    format!("{label} of {}: positive only where {kv}", g.id),
                ));
            }
            ops.push(PlannedOp::new(
                MemoryOp::Forget { id: g.id.clone() },
                label,
                format!("replaced by its {label} candidate(s)"),
            ));
        } else if cfg.restate
            && adherence(&g.text) < 0.5
            && p.n >= cfg.promote_n
            && lcb(&p) > 0.0
        {
            // Revise: the evidence supports a guideline its wording leaves
            // tentative; the writer restates it firmly as a provisional
            // candidate that inherits the evidence and replaces it.
            let text = caller
                .call(
                    &WriteRole,
                    &WriteInput {
                        operation: "revise".into(),
                        decisions: g.decisions.clone(),
                        conditions: g.conditions.clone(),
                        offset: None,
                        parents: vec![g.line()],
                        evidence: format!(
                            "fitness {:+.3} ± {:.3} over {} credits: supported; restate it firmly",
                            p.mean,
                            p.se(0.3),
                            p.n
                        ),
                    },
                    None,
                )?
                .text;
            let mut c = Guideline::new(
                MemoryId::new(format!("{}:revise:{}", g.id, at.0)),
                Mode::Generate,
                g.decisions.clone(),
                g.conditions.clone(),
                text,
                "revise",
                at,
            );
            c.version = g.version + 1;
            c.parents = vec![g.id.as_str().to_string()];
            c.fitness = g.fitness.clone();
            c.by_context = g.by_context.clone();
            c.rec_version = g.rec_version;
            c.last_used = at.0;
            self.bump("restated");
            ops.push(PlannedOp::new(
                MemoryOp::Create {
                    record: c.record(namespace()),
                },
                "revise",
                format!(
                    "revise of {}: supported (lcb {:+.3}) but worded tentatively",
                    g.id,
                    lcb(&p)
                ),
            ));
            ops.push(PlannedOp::new(
                MemoryOp::Forget { id: g.id.clone() },
                "revise",
                "replaced by its revised candidate",
            ));
        } else if g.status == RecordStatus::Provisional && p.n >= cfg.promote_n && lcb(&p) > 0.0 {
            self.bump("promoted");
            ops.push(PlannedOp::new(
                MemoryOp::SetStatus {
                    id: g.id.clone(),
                    status: RecordStatus::Promoted,
                },
                "promote",
                format!("fitness {:+.3} over {} credits", p.mean, p.n),
            ));
        }
        Ok(ops)
    }

    /// κ = 2 novelty evidence; a parentless provisional candidate once it is
    /// confirmed.
    #[allow(clippy::too_many_arguments)]
    fn novel(
        &mut self,
        cfg: &TideConfig,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        rec: &Matured,
        item: &EvidenceItem,
        contrast: f64,
        at: LogicalTime,
    ) -> Result<Option<PlannedOp>, PolicyError> {
        let conditions: BTreeMap<String, String> = ["product", "audience"]
            .iter()
            .filter_map(|k| rec.context.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect();
        let key = format!(
            "{}={}|{}",
            item.dimension,
            item.value,
            conditions
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let st = self.novelty.entry(key.clone()).or_default();
        st.push(contrast);
        let st = *st;
        if st.n < cfg.novel_min || lcb(&st) <= 0.0 {
            return Ok(None);
        }
        self.novelty.remove(&key);
        let decisions = BTreeMap::from([(item.dimension.clone(), item.value.clone())]);
        let ns = [namespace()];
        let exists = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .any(|g| g.decisions == decisions && g.conditions == conditions);
        if exists {
            return Ok(None);
        }
        let text = caller
            .call(
                &WriteRole,
                &WriteInput {
                    operation: "novel".into(),
                    decisions: decisions.clone(),
                    conditions: conditions.clone(),
                    offset: None,
                    parents: Vec::new(),
                    evidence: format!("{} supported records, contrast {:+.3}", st.n, st.mean),
                },
                None,
            )?
            .text;
        let mut g = Guideline::new(
            MemoryId::new(format!("tide:gen:novel:{}:{}", at.0, item.dimension)),
            Mode::Generate,
            decisions,
            conditions,
            text,
            "novel",
            at,
        );
        g.fitness.insert("ctr".into(), st);
        g.last_used = at.0;
        self.bump("novel");
        Ok(Some(PlannedOp::new(
            MemoryOp::Create {
                record: g.record(namespace()),
            },
            "candidate",
            format!("confirmed novelty (kappa=2): {key}"),
        )))
    }

    /// Crossover: two responsible, promoted, supported guidelines deciding
    /// different dimensions under the same conditions become one compound
    /// candidate that inherits their pooled evidence; the parents retire
    /// (kept, they would be redundant twins that no leave-one-out replay
    /// could ever hold responsible again).
    fn crossover(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        credited: &Credited,
        gone: &BTreeSet<MemoryId>,
        at: LogicalTime,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let good: Vec<Guideline> = credited
            .iter()
            .filter(|(id, items)| {
                !gone.contains(*id) && items.iter().all(|i| i.2 == Direction::Support)
            })
            .filter_map(|(id, _)| ctx.memory.get(id).and_then(Guideline::read))
            .filter(|g| {
                g.status == RecordStatus::Promoted
                    && g.decisions.len() == 1
                    && lcb(&g.primary()) > 0.0
            })
            .collect();
        for (i, a) in good.iter().enumerate() {
            for b in &good[i + 1..] {
                if a.conditions != b.conditions
                    || a.decisions.keys().any(|k| b.decisions.contains_key(k))
                {
                    continue;
                }
                let mut decisions = a.decisions.clone();
                decisions.extend(b.decisions.clone());
                let ns = [namespace()];
                if ctx
                    .memory
                    .scan_kind(&ns, &RecordKind::Guideline)
                    .filter_map(Guideline::read)
                    .any(|g| g.decisions == decisions && g.conditions == a.conditions)
                {
                    continue;
                }
                let text = caller
                    .call(
                        &WriteRole,
                        &WriteInput {
                            operation: "crossover".into(),
                            decisions: decisions.clone(),
                            conditions: a.conditions.clone(),
                            offset: None,
                            parents: vec![a.line(), b.line()],
                            evidence: "both responsible and supported in the same record".into(),
                        },
                        None,
                    )?
                    .text;
                let mut c = Guideline::new(
                    MemoryId::new(format!("tide:gen:cross:{}", at.0)),
                    Mode::Generate,
                    decisions,
                    a.conditions.clone(),
                    text,
                    "crossover",
                    at,
                );
                c.parents = vec![a.id.as_str().to_string(), b.id.as_str().to_string()];
                let mut f = a.primary();
                f.merge(&b.primary());
                c.fitness.insert("ctr".into(), f);
                c.last_used = at.0;
                c.status = RecordStatus::Provisional;
                c.rec_version = a.rec_version.max(b.rec_version);
                self.bump("crossover");
                let mut ops = vec![PlannedOp::new(
                    MemoryOp::Create {
                        record: c.record(namespace()),
                    },
                    "crossover",
                    format!("crossover of {} and {}", a.id, b.id),
                )];
                for p in [a, b] {
                    ops.push(PlannedOp::new(
                        MemoryOp::Forget { id: p.id.clone() },
                        "crossover",
                        format!(
                            "retired: its decision lives on in the crossover of {} and {}",
                            a.id, b.id
                        ),
                    ));
                }
                return Ok(ops);
            }
        }
        Ok(Vec::new())
    }

    /// Periodic abstraction over promoted siblings (see the module docs).
    fn abstraction(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        pending: &[PlannedOp],
        at: LogicalTime,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let gone: BTreeSet<&MemoryId> = pending
            .iter()
            .filter(|o| matches!(o.op, MemoryOp::Forget { .. }))
            .map(|o| o.op.target())
            .collect();
        let ns = [namespace()];
        let gs: Vec<Guideline> = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .filter(|g| {
                g.mode == Mode::Generate
                    && g.status == RecordStatus::Promoted
                    && !gone.contains(&g.id)
                    && lcb(&g.primary()) > 0.0
            })
            .collect();
        let mut groups: BTreeMap<(String, String, String), Vec<&Guideline>> = BTreeMap::new();
        for g in &gs {
            for attr in g.conditions.keys() {
                let mut rest = g.conditions.clone();
                rest.remove(attr);
                groups
                    .entry((
                        json!(g.decisions).to_string(),
                        json!(rest).to_string(),
                        attr.clone(),
                    ))
                    .or_default()
                    .push(g);
            }
        }
        let mut ops = Vec::new();
        for ((_, _, attr), sibs) in groups {
            if sibs.len() < 2 {
                continue;
            }
            let seen: BTreeSet<&String> = self
                .log
                .iter()
                .filter_map(|r| r.context.get(&attr))
                .collect();
            let covered: BTreeSet<&String> = sibs
                .iter()
                .filter_map(|g| g.conditions.get(&attr))
                .collect();
            if seen.len() < 2 || seen != covered {
                continue;
            }
            let mut conditions = sibs[0].conditions.clone();
            conditions.remove(&attr);
            let decisions = sibs[0].decisions.clone();
            if gs
                .iter()
                .any(|g| g.decisions == decisions && g.conditions == conditions)
            {
                continue;
            }
            let text = caller
                .call(
                    &WriteRole,
                    &WriteInput {
                        operation: "abstract".into(),
                        decisions: decisions.clone(),
                        conditions: conditions.clone(),
                        offset: None,
                        parents: sibs.iter().map(|g| g.line()).collect(),
                        evidence: format!("supported for every {attr} value seen"),
                    },
                    None,
                )?
                .text;
            let mut a = Guideline::new(
                MemoryId::new(format!("tide:gen:abstract:{}:{attr}", at.0)),
                Mode::Generate,
                decisions,
                conditions,
                text,
                "abstract",
                at,
            );
            a.parents = sibs.iter().map(|g| g.id.as_str().to_string()).collect();
            let mut f = Stats::default();
            for g in &sibs {
                f.merge(&g.primary());
            }
            a.fitness.insert("ctr".into(), f);
            a.last_used = at.0;
            self.bump("abstracted");
            ops.push(PlannedOp::new(
                MemoryOp::Create {
                    record: a.record(namespace()),
                },
                "abstract",
                format!(
                    "abstraction over {} siblings differing in {attr}",
                    sibs.len()
                ),
            ));
        }
        Ok(ops)
    }

    /// GovernAndSelect_B over the memory as it will be after `pending`:
    /// returns `pending` without its rejected candidates, then the
    /// expiration and capacity ops.
    fn govern(
        &mut self,
        cfg: &TideConfig,
        ctx: &PolicyCtx<'_>,
        pending: Vec<PlannedOp>,
        at: LogicalTime,
    ) -> Vec<PlannedOp> {
        let ns = [namespace()];
        let mut live: BTreeMap<MemoryId, Guideline> = ctx
            .memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .filter(|g| g.mode == Mode::Generate)
            .map(|g| (g.id.clone(), g))
            .collect();
        let mut rejected: BTreeSet<MemoryId> = BTreeSet::new();
        // Candidates rejected as invalid or conflicting (a duplicate's
        // content already lives, so its parent may still go).
        let mut lost: BTreeSet<MemoryId> = BTreeSet::new();
        // Candidate ids by the parent they would replace.
        let mut children: BTreeMap<String, Vec<MemoryId>> = BTreeMap::new();
        // Parents whose replacement failed: their `Forget` is void.
        let mut kept: BTreeSet<MemoryId> = BTreeSet::new();
        // Parents replaced in this step.
        let mut replaced: BTreeSet<String> = BTreeSet::new();
        for o in &pending {
            match &o.op {
                MemoryOp::Forget { id } if REPLACING.contains(&o.label.as_str()) => {
                    let kids = children.get(id.as_str()).map_or(&[][..], Vec::as_slice);
                    if !kids.is_empty() && kids.iter().all(|k| lost.contains(k)) {
                        kept.insert(id.clone());
                        self.bump("replacement_void");
                    } else {
                        live.remove(id);
                        replaced.insert(id.as_str().to_string());
                    }
                }
                MemoryOp::Forget { id } => {
                    live.remove(id);
                }
                MemoryOp::Create { record } => {
                    let Some(c) = Guideline::read(record) else {
                        continue;
                    };
                    let valid = c
                        .decisions
                        .iter()
                        .all(|(d, v)| options(d).contains(&v.as_str()))
                        && c.conditions
                            .keys()
                            .all(|k| CONTEXT_ATTRIBUTES.contains(&k.as_str()));
                    // A revision shares its parent's decisions and
                    // conditions; it duplicates anything else that does.
                    let dup = live.values().any(|g| {
                        g.decisions == c.decisions
                            && g.conditions == c.conditions
                            && !c.parents.contains(&g.id.as_str().to_string())
                    });
                    let conflict = live.values().any(|g| {
                        g.conditions == c.conditions
                            && !c.parents.contains(&g.id.as_str().to_string())
                            && g.decisions
                                .iter()
                                .any(|(d, v)| c.decisions.get(d).is_some_and(|cv| cv != v))
                    });
                    for parent in &c.parents {
                        children
                            .entry(parent.clone())
                            .or_default()
                            .push(c.id.clone());
                    }
                    if !valid || dup || conflict {
                        rejected.insert(c.id.clone());
                        if !valid || conflict {
                            lost.insert(c.id.clone());
                        }
                        self.bump("candidates_rejected");
                    } else {
                        live.insert(c.id.clone(), c);
                    }
                }
                MemoryOp::UpdateFields { id, fields, .. } => {
                    if let (Some(g), Some(v)) = (
                        live.get_mut(id),
                        fields
                            .get(super::guideline::fields::LAST_USED)
                            .and_then(|v| v.as_u64()),
                    ) {
                        g.last_used = v;
                    }
                }
                _ => {}
            }
        }
        let mut ops: Vec<PlannedOp> = pending
            .into_iter()
            .filter(|o| {
                let t = o.op.target();
                let void = matches!(o.op, MemoryOp::Forget { .. })
                    && REPLACING.contains(&o.label.as_str())
                    && kept.contains(t);
                !rejected.contains(t) && !void
            })
            .collect();
        // Expiration.
        let horizon = at.0.saturating_sub(cfg.expire_after);
        let expired: Vec<MemoryId> = live
            .values()
            .filter(|g| g.last_used.max(g.created_at.0) < horizon && cfg.expire_after > 0)
            .map(|g| g.id.clone())
            .collect();
        for id in expired {
            live.remove(&id);
            self.bump("expired");
            ops.push(PlannedOp::new(
                MemoryOp::Forget { id },
                "expire",
                format!("no traced use in the last {} decisions", cfg.expire_after),
            ));
        }
        // Capacity B.
        if live.len() > cfg.capacity {
            // A candidate that replaces a parent retired in this step takes
            // its parent's place: it competes like an incumbent.
            let heir = |g: &Guideline| g.parents.iter().any(|p| replaced.contains(p));
            let mut ranked: Vec<(bool, f64, MemoryId)> = live
                .values()
                .map(|g| {
                    (
                        g.status != RecordStatus::Provisional || heir(g),
                        lcb(&g.primary()),
                        g.id.clone(),
                    )
                })
                .collect();
            ranked.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
            for (_, s, id) in ranked.into_iter().take(live.len() - cfg.capacity) {
                self.bump("capacity_evicted");
                ops.push(PlannedOp::new(
                    MemoryOp::Forget { id },
                    "evict",
                    format!(
                        "capacity {} reached; weakest (lcb {s:+.3}) goes",
                        cfg.capacity
                    ),
                ));
            }
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    //! GovernAndSelect_B on hand-made pending ops: rejected refinements never
    //! retire their parent, and heirs keep their parent's place at capacity.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use evomem_core::{Catalog, MemoryState};

    fn g(id: &str, dim: &str, val: &str, cond: &[(&str, &str)], n: u64, mean: f64) -> Guideline {
        let mut g = Guideline::new(
            MemoryId::new(id),
            Mode::Generate,
            BTreeMap::from([(dim.to_string(), val.to_string())]),
            cond.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            format!("{dim}={val}"),
            "seed",
            LogicalTime(0),
        );
        g.status = RecordStatus::Promoted;
        g.last_used = 100;
        let mut s = Stats::default();
        for k in 0..n {
            s.push(mean + if k % 2 == 0 { 0.01 } else { -0.01 });
        }
        g.fitness.insert("ctr".into(), s);
        g
    }

    fn child(parent: &Guideline, id: &str, val: &str, cond: &[(&str, &str)]) -> Guideline {
        let dim = parent.decisions.keys().next().unwrap().clone();
        let mut c = g(id, &dim, val, cond, 2, 0.2);
        c.status = RecordStatus::Provisional;
        c.parents = vec![parent.id.as_str().to_string()];
        c
    }

    fn create(c: &Guideline, label: &str) -> PlannedOp {
        PlannedOp::new(
            MemoryOp::Create {
                record: c.record(namespace()),
            },
            label,
            "test",
        )
    }

    fn forget(id: &str, label: &str) -> PlannedOp {
        PlannedOp::new(
            MemoryOp::Forget {
                id: MemoryId::new(id),
            },
            label,
            "test",
        )
    }

    fn memory(gs: &[&Guideline]) -> MemoryState {
        let mut m = MemoryState::new();
        for g in gs {
            m.apply(
                &MemoryOp::Create {
                    record: g.record(namespace()),
                },
                LogicalTime(0),
            )
            .unwrap();
        }
        m
    }

    fn run(cfg: &TideConfig, m: &MemoryState, pending: Vec<PlannedOp>) -> Vec<PlannedOp> {
        let catalog = Catalog { items: Vec::new() };
        let ctx = PolicyCtx {
            memory: m,
            catalog: &catalog,
            users: &[],
            now: LogicalTime(100),
        };
        GenerateState::default().govern(cfg, &ctx, pending, LogicalTime(100))
    }

    fn forgets(ops: &[PlannedOp]) -> Vec<String> {
        ops.iter()
            .filter(|o| matches!(o.op, MemoryOp::Forget { .. }))
            .map(|o| o.op.target().as_str().to_string())
            .collect()
    }

    #[test]
    fn a_narrowing_rejected_for_conflict_does_not_retire_its_parent() {
        let parent = g("g:p", "style", "vivid", &[], 6, -0.1);
        // A live guideline prescribes `plain` for pros: narrowing the parent
        // to pros contradicts it.
        let other = g("g:o", "style", "plain", &[("audience", "pro")], 6, 0.3);
        let m = memory(&[&parent, &other]);
        let c = child(&parent, "g:p:narrow0", "vivid", &[("audience", "pro")]);
        let cfg = TideConfig::default();
        let out = run(
            &cfg,
            &m,
            vec![create(&c, "narrow"), forget("g:p", "narrow")],
        );
        assert!(out.iter().all(|o| o.op.target().as_str() != "g:p:narrow0"));
        assert!(forgets(&out).is_empty(), "{:?}", forgets(&out));
        // An eviction on the parent's own evidence still goes through.
        let out = run(&cfg, &m, vec![forget("g:p", "evict")]);
        assert_eq!(forgets(&out), vec!["g:p".to_string()]);
    }

    #[test]
    fn a_rejected_crossover_keeps_both_parents_and_a_duplicate_still_replaces() {
        let a = g("g:a", "style", "vivid", &[("audience", "pro")], 6, 0.3);
        let b = g("g:b", "cta", "urgent", &[("audience", "pro")], 6, 0.3);
        let clash = g("g:x", "cta", "soft", &[("audience", "pro")], 6, 0.3);
        let m = memory(&[&a, &b, &clash]);
        let mut cross = g("g:cross", "style", "vivid", &[("audience", "pro")], 4, 0.3);
        cross.decisions.insert("cta".into(), "urgent".into());
        cross.status = RecordStatus::Provisional;
        cross.parents = vec!["g:a".into(), "g:b".into()];
        let cfg = TideConfig::default();
        let pending = vec![
            create(&cross, "crossover"),
            forget("g:a", "crossover"),
            forget("g:b", "crossover"),
        ];
        let out = run(&cfg, &m, pending);
        assert!(out.is_empty(), "conflict with g:x: nothing happens, {out:?}");

        // A narrowing whose content already lives is a duplicate: the parent
        // is still replaced (by the live twin).
        let parent = g("g:p", "style", "vivid", &[], 6, -0.1);
        let twin = g("g:t", "style", "vivid", &[("audience", "pro")], 6, 0.3);
        let m = memory(&[&parent, &twin]);
        let c = child(&parent, "g:p:narrow0", "vivid", &[("audience", "pro")]);
        let out = run(
            &cfg,
            &m,
            vec![create(&c, "narrow"), forget("g:p", "narrow")],
        );
        assert_eq!(forgets(&out), vec!["g:p".to_string()]);
        assert!(out.iter().all(|o| o.op.target().as_str() != "g:p:narrow0"));
    }

    #[test]
    fn at_capacity_an_heir_takes_its_parents_place() {
        let parent = g("g:p", "style", "vivid", &[], 6, -0.1);
        let strong = g("g:s", "cta", "urgent", &[], 6, 0.5);
        let weak = g("g:w", "density", "high", &[], 6, 0.01);
        let m = memory(&[&parent, &strong, &weak]);
        let c = child(&parent, "g:p:narrow0", "vivid", &[("audience", "pro")]);
        let cfg = TideConfig {
            capacity: 2,
            ..TideConfig::default()
        };
        let fresh = {
            let mut f = g("g:new", "selling_point", "novelty", &[], 2, 0.9);
            f.status = RecordStatus::Provisional;
            f
        };
        let out = run(
            &cfg,
            &m,
            vec![
                create(&c, "narrow"),
                forget("g:p", "narrow"),
                create(&fresh, "candidate"),
            ],
        );
        // Live after the edit: g:s, g:w, the heir and the fresh candidate;
        // two must go: the fresh provisional one first, then the weakest
        // incumbent, never the heir.
        let mut gone = forgets(&out);
        gone.sort();
        assert_eq!(gone, vec!["g:new", "g:p", "g:w"], "{out:?}");
    }
}
