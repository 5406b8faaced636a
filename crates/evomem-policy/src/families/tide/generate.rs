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
//!    objective (and per context value of the item's context c), and keeps
//!    the item itself, e = (d, c, s), among its last `evidence_keep`,
//!    gathered under one recommender version: after a version change the
//!    old evidence is archived and the guideline is judged afresh; κ = 2: a
//!    supported decision that no guideline of the whole memory prescribes
//!    where the record applies accumulates novelty evidence under its
//!    (product, audience), and after `novel_min` supported records becomes
//!    a parentless provisional candidate; κ = 0: no feedback-driven update;
//! 5. candidates from each credited guideline (narrow, split, revise by
//!    restating a supported but tentatively worded guideline, promote,
//!    evict), crossover of complementary responsible guidelines, and every
//!    `abstract_every` matured records abstraction over the last
//!    `abstract_window` records of the log: [`super::evolve`], the same code
//!    the Predict path runs. So credit that lands on a memory the generator
//!    never used (no usage trace) makes that memory binding for future
//!    materials (its restated, firm candidate);
//! 6. GovernAndSelect_B ([`super::evolve::Evolver::govern`]): validity,
//!    duplicates, conflicts, expiry after `expire_after` decisions without
//!    a traced use, capacity B with heirs taking their parent's place.
//!
//! The credited set of a decision is exactly the targets of its `credit`
//! ops, which the arena reads to score responsibility.

use super::evolve::{lcb, CreditedGuideline, Evolver};
use super::generator::{Adherence, GenerateInput, GenerateOutput, GuidelineIn};
use super::guideline::{EvidenceRecord, Guideline, Mode, Stats};
use super::roles::{
    AlignInput, AlignRole, Direction, EvidenceInput, EvidenceItem, EvidenceOutput, EvidenceRole,
    GenerateRole,
    GuidelineView, RubricInput, RubricRole, WriteInput, WriteRole,
};
use super::semantic::{semantic_credit, Matured, Semantic};
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
    adherence: Adherence,
) -> GenerateInput {
    GenerateInput {
        request_id: request.id.clone(),
        request_text: request.text.clone(),
        attributes: request.attributes.clone(),
        guidelines,
        sample,
        adherence,
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

/// One evidence item a guideline is held responsible for.
#[derive(Debug, Clone)]
struct Credit {
    /// The item e = (d, c, s).
    evidence: EvidenceRecord,
    /// Its dimension (`material` under `attribution=retrieved`).
    dimension: String,
}

/// Credited guidelines of one record: per guideline, its evidence items.
type Credited = BTreeMap<MemoryId, Vec<Credit>>;

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
            Edit::Evolve => self.evolve(
                caller,
                &Maturing {
                    cfg,
                    ctx,
                    rec: &rec,
                    open: &open,
                    snap: &snap,
                    sources,
                },
            ),
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
            // Temperature 0 takes up every applicable guideline, so the
            // sampling generator's take-up probabilities (the world's) play
            // no part in a replay.
            &generator_input(request, guidelines, None, Adherence::default()),
            None,
        )
    }

    /// Evolution after one material matured (`edit=evolve`), in the paper's
    /// order: usage marks, semantic credit against matched controls (C_sem),
    /// responsibility (trace, alignment, counterfactual replay), κ = 2
    /// novelty when nothing is responsible, credit and edits of the
    /// responsible guidelines, crossover, periodic abstraction, and
    /// capacity-bounded governance over all of it.
    fn evolve(
        &mut self,
        caller: &mut RoleCaller,
        m: &Maturing<'_, '_>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut ops = Vec::new();
        let mut touched = mark_used(m);
        let sem = semantic_credit(&self.log, m.rec);
        let ev = evidence(caller, m, &sem)?;
        let comparable = comparable(m);
        let mut credited = Credited::new();
        let mut kappa = 0u8;
        if ev.valid {
            let items: Vec<&EvidenceItem> = ev
                .items
                .iter()
                .filter(|i| i.direction != Direction::None)
                .collect();
            match m.cfg.attribution {
                Attribution::Retrieved => credited = credit_retrieved(m, &sem, &comparable),
                Attribution::Tide => {
                    credited = credit_responsible(caller, m, &sem, &comparable, &items)?;
                    if credited.is_empty() && self.propose_novel(caller, m, &sem, &items, &mut ops)? {
                        kappa = 2;
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
        self.apply_credits(caller, m, &credited, &ev.reason, &mut touched, &mut ops)?;
        if m.cfg.attribution == Attribution::Tide {
            self.crossover(caller, m, &credited, &mut ops)?;
        }
        ops.extend(touched.into_iter().map(|(id, g)| usage_mark(id, &g)));
        self.abstract_periodically(caller, m, &mut ops)?;
        Ok(self.evolver(m.cfg).govern(m.ctx, ops, m.open.decided_at.0))
    }

    /// κ = 2: the supported decisions that no guideline of the whole memory
    /// prescribes where this record applies (not only the retrieved ones:
    /// `k_ret` may have cut a guideline that covers it) gather novelty
    /// evidence, and a confirmed one becomes a candidate. True when any
    /// such decision was found.
    fn propose_novel(
        &mut self,
        caller: &mut RoleCaller,
        m: &Maturing<'_, '_>,
        sem: &Semantic,
        items: &[&EvidenceItem],
        ops: &mut Vec<PlannedOp>,
    ) -> Result<bool, PolicyError> {
        let memory: Vec<Guideline> = m
            .ctx
            .memory
            .scan_kind(&[namespace()], &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .filter(|g| {
                g.mode == Mode::Generate
                    && g.created_at <= m.open.decided_at
                    && g.applies(&m.rec.context)
            })
            .collect();
        let mut found = false;
        for item in items.iter().filter(|i| i.direction == Direction::Support) {
            let covered = memory
                .iter()
                .any(|g| g.decisions.get(&item.dimension) == Some(&item.value));
            if covered {
                continue;
            }
            found = true;
            let contrast = sem
                .contrasts
                .iter()
                .find(|c| c.dimension == item.dimension)
                .and_then(|c| c.objectives.get("ctr").copied())
                .unwrap_or((0.0, 1.0));
            if let Some(op) = self.novel(caller, m, item, contrast.0)? {
                ops.push(op.with_sources(m.sources.clone()));
            }
        }
        Ok(found)
    }

    /// Credit each responsible guideline with its evidence items (archiving
    /// evidence from another recommender version first), then let the
    /// evolver edit it.
    fn apply_credits(
        &mut self,
        caller: &mut RoleCaller,
        m: &Maturing<'_, '_>,
        credited: &Credited,
        reason: &str,
        touched: &mut BTreeMap<MemoryId, Guideline>,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
        for (id, items) in credited {
            let Some(mut g) = touched
                .get(id)
                .cloned()
                .or_else(|| m.ctx.memory.get(id).and_then(Guideline::read))
            else {
                continue;
            };
            if g.rec_version != m.rec.env.rec_version {
                // Evidence from another recommender version is not
                // comparable: archive it and start afresh.
                if g.rec_version != 0 {
                    for (k, v) in std::mem::take(&mut g.fitness) {
                        g.archive.entry(k).or_default().merge(&v);
                    }
                    g.by_context.clear();
                    self.bump("evidence_archived");
                }
                g.rec_version = m.rec.env.rec_version;
            }
            for c in items {
                let objectives = &c.evidence.objectives;
                for (obj, (e, _)) in objectives {
                    g.fitness.entry(obj.clone()).or_default().push(*e);
                }
                if let Some((e, _)) = objectives.get("ctr") {
                    for (k, v) in &c.evidence.context {
                        g.by_context.entry(format!("{k}={v}")).or_default().push(*e);
                    }
                }
                g.keep_evidence(c.evidence.clone(), m.cfg.evidence_keep);
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
                        m.rec.decision_id,
                        items
                            .iter()
                            .map(|c| format!("{} {:?}", c.dimension, c.evidence.direction))
                            .collect::<Vec<_>>()
                            .join(", "),
                        reason
                    ),
                )
                .with_sources(m.sources.clone()),
            );
            let at = m.open.decided_at;
            ops.extend(
                self.evolver(m.cfg)
                    .edit(caller, m.ctx, &g, at, at.0)?
                    .into_iter()
                    .map(|o| o.with_sources(m.sources.clone())),
            );
        }
        Ok(())
    }

    /// Crossover of complementary responsible guidelines (those not
    /// forgotten by this record's edits).
    fn crossover(
        &mut self,
        caller: &mut RoleCaller,
        m: &Maturing<'_, '_>,
        credited: &Credited,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
        let gone: BTreeSet<MemoryId> = ops
            .iter()
            .filter(|o| matches!(o.op, MemoryOp::Forget { .. }))
            .map(|o| o.op.target().clone())
            .collect();
        let credited: Vec<CreditedGuideline> = credited
            .iter()
            .map(|(id, items)| CreditedGuideline {
                id: id.clone(),
                supported: items
                    .iter()
                    .all(|c| c.evidence.direction == Direction::Support),
            })
            .collect();
        let at = m.open.decided_at;
        for op in self
            .evolver(m.cfg)
            .crossover(caller, m.ctx, &credited, &gone, at, at.0)?
        {
            ops.push(op.with_sources(m.sources.clone()));
        }
        Ok(())
    }

    /// Every `abstract_every` matured records, abstraction over H_t: the
    /// last `abstract_window` valid (matured) records.
    fn abstract_periodically(
        &mut self,
        caller: &mut RoleCaller,
        m: &Maturing<'_, '_>,
        ops: &mut Vec<PlannedOp>,
    ) -> Result<(), PolicyError> {
        if self.matured_own.checked_rem(m.cfg.abstract_every) != Some(0) {
            return Ok(());
        }
        let at = m.open.decided_at;
        let from = self.log.len().saturating_sub(m.cfg.abstract_window);
        let log = std::mem::take(&mut self.log);
        let recent: Vec<&BTreeMap<String, String>> =
            log[from..].iter().map(|r| &r.context).collect();
        let more = self
            .evolver(m.cfg)
            .abstraction(caller, m.ctx, &recent, ops, at, at.0);
        self.log = log;
        ops.extend(more?);
        Ok(())
    }

    /// The shared candidate operations over the generation namespace.
    fn evolver<'a>(&'a mut self, cfg: &'a TideConfig) -> Evolver<'a> {
        Evolver {
            cfg,
            mode: Mode::Generate,
            ns: namespace(),
            prefix: "tide:gen".into(),
            token: None,
            counts: &mut self.counts,
        }
    }

    /// κ = 2 novelty evidence; a parentless provisional candidate once it is
    /// confirmed.
    fn novel(
        &mut self,
        caller: &mut RoleCaller,
        m: &Maturing<'_, '_>,
        item: &EvidenceItem,
        contrast: f64,
    ) -> Result<Option<PlannedOp>, PolicyError> {
        let (cfg, ctx, rec, at) = (m.cfg, m.ctx, m.rec, m.open.decided_at);
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
        if st.n < cfg.novel_min || lcb(&st, cfg.se_floor) <= 0.0 {
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
}

/// The inputs of one matured record's evolution, shared by its steps.
struct Maturing<'a, 'c> {
    cfg: &'a TideConfig,
    ctx: &'a PolicyCtx<'c>,
    rec: &'a Matured,
    open: &'a Open,
    snap: &'a Snap,
    /// The logical times the ops of this record cite.
    sources: Vec<LogicalTime>,
}

/// The guidelines the decision used (traced; `trace=false`: every retrieved
/// one), with their last use moved to the decision.
fn mark_used(m: &Maturing<'_, '_>) -> BTreeMap<MemoryId, Guideline> {
    let used_ids: BTreeSet<MemoryId> = if m.cfg.trace {
        m.open.traced.iter().cloned().collect()
    } else {
        m.snap
            .retrieved
            .iter()
            .map(|(g, _)| MemoryId::new(g.id.clone()))
            .collect()
    };
    let mut touched = BTreeMap::new();
    for id in &used_ids {
        if let Some(mut g) = m.ctx.memory.get(id).and_then(Guideline::read) {
            g.last_used = g.last_used.max(m.open.decided_at.0);
            touched.insert(id.clone(), g);
        }
    }
    touched
}

/// The evidence chain and z_sem of the record's semantic credit.
fn evidence(
    caller: &mut RoleCaller,
    m: &Maturing<'_, '_>,
    sem: &Semantic,
) -> Result<EvidenceOutput, PolicyError> {
    caller.call(
        &EvidenceRole,
        &EvidenceInput {
            decisions: m.rec.decisions.clone(),
            context: m.rec.context.clone(),
            environment: sem.environment.clone(),
            controls: sem.controls,
            min_controls: m.cfg.min_controls,
            fitness: sem.fitness.clone(),
            contrasts: sem.contrasts.clone(),
            counterexamples: sem.counterexamples,
            agreeing: sem.agreeing,
            z_min: m.cfg.z_min,
            conflict_z: m.cfg.conflict_z,
        },
        None,
    )
}

/// The retrieved guidelines that can still be credited: live, at the
/// version the decision saw.
fn comparable<'a>(m: &Maturing<'a, '_>) -> Vec<&'a GuidelineIn> {
    m.snap
        .retrieved
        .iter()
        .filter(|(g, v)| {
            m.ctx
                .memory
                .get(&MemoryId::new(g.id.clone()))
                .and_then(Guideline::read)
                .is_some_and(|cur| cur.version == *v)
        })
        .map(|(g, _)| g)
        .collect()
}

/// `attribution=retrieved` (the baseline): every comparable retrieved
/// guideline is credited with the material's whole outcome.
fn credit_retrieved(m: &Maturing<'_, '_>, sem: &Semantic, comparable: &[&GuidelineIn]) -> Credited {
    let dir = if sem.fitness.get("ctr").is_some_and(|f| f.0 > 0.0) {
        Direction::Support
    } else {
        Direction::Counter
    };
    let context = super::roles::item_context(&m.rec.context);
    let mut credited = Credited::new();
    for g in comparable {
        credited
            .entry(MemoryId::new(g.id.clone()))
            .or_default()
            .push(Credit {
                evidence: EvidenceRecord {
                    decision: m.rec.decisions.clone(),
                    context: context.clone(),
                    direction: dir,
                    objectives: sem.fitness.clone(),
                    controls: sem.controls,
                    source: m.rec.decision_id,
                },
                dimension: "material".into(),
            });
    }
    credited
}

/// TIDE's responsibility: a comparable guideline is credited with an
/// evidence item when it decides the item's dimension, was used (the
/// trace), aligns with the item, and (`cf`) leaving it out of a
/// deterministic replay changes that dimension's decision.
///
/// The replay regenerates the material from what went into it: the traced
/// guidelines (`trace=false`: every retrieved one), each binding at
/// temperature 0. Both sides of the leave-one-out comparison are replays,
/// G(x, M) against G(x, M \ {m}). With the trace, G(x, M) is the material's
/// own decision (the first traced guideline of each dimension decided it);
/// without it, M is everything retrieved, and the replay may credit a
/// memory the generator skipped.
fn credit_responsible(
    caller: &mut RoleCaller,
    m: &Maturing<'_, '_>,
    sem: &Semantic,
    comparable: &[&GuidelineIn],
    items: &[&EvidenceItem],
) -> Result<Credited, PolicyError> {
    let (cfg, open) = (m.cfg, m.open);
    let all: Vec<GuidelineIn> = m
        .snap
        .retrieved
        .iter()
        .map(|(g, _)| g)
        .filter(|g| !cfg.trace || open.traced.contains(&MemoryId::new(g.id.clone())))
        .cloned()
        .collect();
    let base = if cfg.cf && !items.is_empty() {
        Some(GenerateState::replay(caller, &open.request, all.clone())?)
    } else {
        None
    };
    let mut without: BTreeMap<String, GenerateOutput> = BTreeMap::new();
    let mut credited = Credited::new();
    for item in items {
        for g in comparable {
            if !g.decisions.contains_key(&item.dimension) {
                continue;
            }
            let id = MemoryId::new(g.id.clone());
            if cfg.trace && !open.traced.contains(&id) {
                continue;
            }
            let aligned = caller
                .call(
                    &AlignRole,
                    &AlignInput {
                        guideline: view(g),
                        dimension: item.dimension.clone(),
                        value: item.value.clone(),
                        context: m.rec.context.clone(),
                    },
                    None,
                )?
                .aligned;
            if !aligned {
                continue;
            }
            if cfg.cf {
                if !without.contains_key(&g.id) {
                    let rest: Vec<GuidelineIn> =
                        all.iter().filter(|o| o.id != g.id).cloned().collect();
                    let out = GenerateState::replay(caller, &open.request, rest)?;
                    without.insert(g.id.clone(), out);
                }
                let base_value = base.as_ref().and_then(|o| o.decisions.get(&item.dimension));
                let moved = without
                    .get(&g.id)
                    .and_then(|o| o.decisions.get(&item.dimension))
                    != base_value;
                if !moved {
                    continue;
                }
            }
            let contrast = sem
                .contrasts
                .iter()
                .find(|c| c.dimension == item.dimension)
                .map(|c| c.objectives.clone())
                .unwrap_or_default();
            credited.entry(id).or_default().push(Credit {
                evidence: EvidenceRecord {
                    decision: BTreeMap::from([(item.dimension.clone(), item.value.clone())]),
                    context: item.context.clone(),
                    direction: item.direction,
                    objectives: contrast,
                    controls: sem.controls,
                    source: m.rec.decision_id,
                },
                dimension: item.dimension.clone(),
            });
        }
    }
    Ok(credited)
}

/// The op that records a use (for expiration) of a guideline that was used
/// but not credited.
fn usage_mark(id: MemoryId, g: &Guideline) -> PlannedOp {
    PlannedOp::new(
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
    )
}
