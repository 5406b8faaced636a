//! TIDE's candidate operations and GovernAndSelect_B, one code for both
//! decision spaces (`tide-recommendation-feedback-evolves-memory`, §3.4 and
//! the GovernAndSelect_B equation): the Generate path ([`super::generate`])
//! and the Predict path ([`super::predict`]) credit their guidelines in their
//! own way, then hand every credited guideline to [`Evolver::edit`], the
//! credited set to [`Evolver::crossover`], the recent valid records to
//! [`Evolver::abstraction`], and all pending ops to [`Evolver::govern`].
//! What differs between the spaces is only what a decision value is and
//! how two values compare ([`Mode::same`]); see [`super::guideline`].
//!
//! **Candidates from a credited guideline** ([`Evolver::edit`]). It is
//! edited only when its evidence says removing it improves utility: overall
//! (mean + se < 0 after `evict_n` credits), or in one context value of an
//! attribute (same test on that value's evidence) while another value of the
//! same attribute is significantly positive (mean − se > 0, n ≥ 2). It is then
//! *narrowed* to the context value where its evidence is positive, *split*
//! when another value of that attribute is significantly negative (the second
//! child prescribes, there, the generator's prior in generation and the
//! offset refitted on that context's drift in prediction), else evicted. A
//! narrowing that would contradict a live guideline cannot be placed: the
//! guideline is then evicted only when its overall evidence is negative. With
//! positive evidence the guideline may be *revised* into a provisional
//! candidate that replaces it: generation restates a supported but
//! tentatively worded guideline firmly (`restate`); prediction refits an
//! offset whose mean drift exceeds `revise_gap` after `promote_n` credits.
//! Otherwise a provisional guideline with lcb > 0 after `promote_n` credits
//! is promoted.
//!
//! **Crossover**: two responsible, promoted, supported single-dimension
//! guidelines on different dimensions with the same conditions become one
//! compound candidate with their pooled evidence; the parents retire.
//! **Abstraction**: promoted supported siblings that prescribe the same on
//! the same dimensions and differ in one condition attribute, covering every
//! value of that attribute seen in the recent valid records H_t (the last
//! `abstract_window`), give a parent without that condition.
//!
//! **GovernAndSelect_B** ([`Evolver::govern`]): candidates must be valid
//! ([`Mode::valid`]), are dropped as duplicates of a live guideline or when
//! they conflict with one (same conditions, a shared dimension prescribed
//! differently) that is not their parent; guidelines with no traced use for
//! `expire_after` decisions expire; above capacity B the weakest go,
//! provisional candidates before incumbents (score: lcb of the primary
//! fitness), and a candidate that replaces a parent retired in the same step
//! takes its parent's place. A parent whose every candidate was rejected as
//! invalid or conflicting is not retired (its `Forget` is void).

use super::guideline::{offset_value, parse_offset, prior, Guideline, Mode, Stats};
use super::roles::{Direction, WriteInput, WriteRole};
use super::TideConfig;
use evomem_core::{
    LogicalTime, MemoryId, MemoryOp, Namespace, PlannedOp, PolicyCtx, PolicyError, RecordKind,
    RecordStatus,
};
use evomem_kit::RoleCaller;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// Labels of the `Forget` ops that retire a parent in favour of its
/// candidates; such a forget is void when every candidate was rejected as
/// invalid or conflicting.
pub const REPLACING: [&str; 4] = ["narrow", "split", "crossover", "revise"];

/// Event counters (reported in the policy's stats).
pub type Counts = BTreeMap<&'static str, u64>;

/// Mean minus one standard error (`floor` floors the standard deviation);
/// 0 without evidence.
pub fn lcb(s: &Stats, floor: f64) -> f64 {
    if s.n == 0 {
        0.0
    } else {
        s.mean - s.se(floor)
    }
}

/// A credited guideline as crossover sees it.
#[derive(Debug, Clone)]
pub struct CreditedGuideline {
    /// The guideline.
    pub id: MemoryId,
    /// Every evidence item it was credited with supports its decision.
    pub supported: bool,
}

/// The candidate operations of one namespace and decision space.
pub struct Evolver<'a> {
    /// Keys.
    pub cfg: &'a TideConfig,
    /// Decision space.
    pub mode: Mode,
    /// Namespace of the guidelines.
    pub ns: Namespace,
    /// Id prefix of parentless candidates (crossover, abstraction).
    pub prefix: String,
    /// The caller key of the role calls (prediction: the user's token).
    pub token: Option<&'a str>,
    /// Event counters.
    pub counts: &'a mut Counts,
}

/// `parent`'s id without its time suffix, with `:{label}{i}` appended once.
fn child_id(parent: &MemoryId, label: &str, i: usize, at: LogicalTime) -> MemoryId {
    let stem = parent.as_str().split('@').next().unwrap_or("");
    let tag = format!(":{label}{i}");
    if stem.ends_with(&tag) {
        MemoryId::new(format!("{stem}@{}", at.0))
    } else {
        MemoryId::new(format!("{stem}{tag}@{}", at.0))
    }
}

impl Evolver<'_> {
    fn bump(&mut self, k: &'static str) {
        *self.counts.entry(k).or_insert(0) += 1;
    }

    fn floor(&self) -> f64 {
        self.cfg.floor(self.mode)
    }

    fn lcb(&self, s: &Stats) -> f64 {
        lcb(s, self.floor())
    }

    /// Significantly negative evidence after `evict_n` observations.
    fn negative(&self, s: &Stats) -> bool {
        s.n >= self.cfg.evict_n && s.mean + s.se(self.floor()) < 0.0
    }

    /// The live guidelines of this space and namespace.
    pub fn live(&self, ctx: &PolicyCtx<'_>) -> Vec<Guideline> {
        let ns = [self.ns.clone()];
        ctx.memory
            .scan_kind(&ns, &RecordKind::Guideline)
            .filter_map(Guideline::read)
            .filter(|g| g.mode == self.mode)
            .collect()
    }

    /// The candidate writer's text for `decisions` under `conditions`.
    fn write(
        &self,
        caller: &mut RoleCaller,
        operation: &str,
        decisions: &BTreeMap<String, String>,
        conditions: &BTreeMap<String, String>,
        parents: Vec<String>,
        evidence: String,
    ) -> Result<String, PolicyError> {
        let offset = match self.mode {
            Mode::Generate => None,
            Mode::Predict => {
                let xs: Vec<f64> = decisions.values().filter_map(|v| parse_offset(v)).collect();
                (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
            }
        };
        Ok(caller
            .call(
                &WriteRole,
                &WriteInput {
                    operation: operation.into(),
                    decisions: decisions.clone(),
                    conditions: conditions.clone(),
                    offset,
                    parents,
                    evidence,
                },
                self.token,
            )?
            .text)
    }

    /// `g`'s decisions refitted on its drift evidence (overall, or in the
    /// context value `kv`): generation keeps the decisions; prediction moves
    /// every offset by the shrunk mean drift.
    fn refit(&self, g: &Guideline, kv: Option<&str>) -> BTreeMap<String, String> {
        match self.mode {
            Mode::Generate => g.decisions.clone(),
            Mode::Predict => {
                let d = match kv {
                    None => Some(g.residual),
                    Some(kv) => g.residual_by_context.get(kv).copied(),
                };
                let shift = d.map_or(0.0, |s| {
                    let n = s.n as f64;
                    s.mean * n / (n + self.cfg.shrink)
                });
                g.decisions
                    .iter()
                    .map(|(k, v)| {
                        let x = parse_offset(v).unwrap_or(0.0) + shift;
                        (k.clone(), offset_value(x.clamp(-4.0, 4.0)))
                    })
                    .collect()
            }
        }
    }

    /// The second child of a split, for context value `kv`: the prior
    /// (generation) or the offset refitted there (prediction).
    fn split_decisions(&self, g: &Guideline, kv: &str) -> BTreeMap<String, String> {
        match self.mode {
            Mode::Generate => g
                .decisions
                .keys()
                .map(|d| (d.clone(), prior(d).to_string()))
                .collect(),
            Mode::Predict => self.refit(g, Some(kv)),
        }
    }

    /// A live guideline other than `g` under `conditions` that contradicts
    /// `decisions`.
    fn contradicted(
        &self,
        ctx: &PolicyCtx<'_>,
        g: &Guideline,
        decisions: &BTreeMap<String, String>,
        conditions: &BTreeMap<String, String>,
    ) -> bool {
        self.live(ctx).iter().any(|o| {
            o.id != g.id
                && o.conditions == *conditions
                && self
                    .mode
                    .contradicts(&o.decisions, decisions, self.cfg.revise_gap)
        })
    }

    /// Narrow, split, evict, revise or promote one credited guideline (see
    /// the module docs). `clock` is the usage clock of expiry.
    pub fn edit(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        g: &Guideline,
        at: LogicalTime,
        clock: u64,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let p = g.primary();
        let mixed = self.mixed_attribute(g);
        if self.negative(&p) || mixed.is_some() {
            self.narrow_or_evict(caller, ctx, g, mixed, at, clock)
        } else if let Some((decisions, why)) = self.revision(g) {
            self.revise(caller, g, decisions, why, at, clock)
        } else if g.status == RecordStatus::Provisional
            && p.n >= self.cfg.promote_n
            && self.lcb(&p) > 0.0
        {
            self.bump("promoted");
            Ok(vec![PlannedOp::new(
                MemoryOp::SetStatus {
                    id: g.id.clone(),
                    status: RecordStatus::Promoted,
                },
                "promote",
                format!("fitness {:+.3} over {} credits", p.mean, p.n),
            )])
        } else {
            Ok(Vec::new())
        }
    }

    /// An attribute (not among the conditions) with one value where the
    /// evidence is significantly negative and another where it is
    /// significantly positive.
    fn mixed_attribute(&self, g: &Guideline) -> Option<String> {
        g.by_context
            .iter()
            .filter(|(k, s)| !g.conditions.contains_key(&attr_of(k)) && self.negative(s))
            .find_map(|(k, _)| {
                let attr = attr_of(k);
                g.by_context
                    .iter()
                    .any(|(k2, s2)| {
                        k2 != k && attr_of(k2) == attr && s2.n >= 2 && self.lcb(s2) > 0.0
                    })
                    .then_some(attr)
            })
    }

    /// A guideline with negative or mixed evidence: narrowed to the context
    /// value where its evidence is best (and split, with a revised child,
    /// where another value of that attribute is significantly negative), or
    /// evicted when no narrowing can be placed.
    fn narrow_or_evict(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        g: &Guideline,
        mixed: Option<String>,
        at: LogicalTime,
        clock: u64,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let p = g.primary();
        let best = g
            .by_context
            .iter()
            .filter(|(k, s)| {
                let attr = attr_of(k);
                s.n >= 2
                    && !g.conditions.contains_key(&attr)
                    && mixed.as_ref().is_none_or(|m| *m == attr)
                    && self.lcb(s) > 0.0
            })
            .max_by(|a, b| a.1.mean.total_cmp(&b.1.mean).then(b.0.cmp(a.0)))
            .map(|(k, s)| (k.clone(), *s));
        let narrowed = best.as_ref().map(|(kv, _)| {
            let (attr, val) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
            let mut conditions = g.conditions.clone();
            conditions.insert(attr.to_string(), val.to_string());
            (self.refit(g, Some(kv)), conditions)
        });
        // A narrowing that contradicts a live guideline cannot be placed
        // (GovernAndSelect rejects it): then evict only on overall negative
        // evidence, else keep the guideline as it is.
        let blocked = narrowed
            .as_ref()
            .is_some_and(|(d, c)| self.contradicted(ctx, g, d, c));
        if blocked {
            self.bump("narrow_blocked");
            if !self.negative(&p) {
                return Ok(Vec::new());
            }
        }
        let (Some((kv, s)), Some((decisions, conditions))) =
            (best.filter(|_| !blocked), narrowed)
        else {
            self.bump("evicted");
            return Ok(vec![PlannedOp::new(
                MemoryOp::Forget { id: g.id.clone() },
                "evict",
                format!(
                    "fitness {:+.3} ± {:.3} over {} credits: removing it improves utility",
                    p.mean,
                    p.se(self.floor()),
                    p.n
                ),
            )]);
        };
        let mut children = vec![(decisions, conditions, s, "narrow")];
        children.extend(self.revised_sibling(g, &kv));
        let label = if children.len() > 1 {
            "split"
        } else {
            "narrow"
        };
        let mut ops = Vec::new();
        for (i, (decisions, conditions, ev, how)) in children.into_iter().enumerate() {
            let text = self.write(
                caller,
                how,
                &decisions,
                &conditions,
                vec![g.line()],
                format!(
                    "parent fitness {:+.3} overall (n={}), {:+.3} where {} (n={})",
                    p.mean, p.n, ev.mean, kv, ev.n
                ),
            )?;
            let mut c = Guideline::new(
                child_id(&g.id, label, i, at),
                self.mode,
                decisions,
                conditions,
                text,
                label,
                at,
            );
            c.version = g.version + 1;
            c.parents = vec![g.id.as_str().to_string()];
            c.fitness.insert(self.mode.primary_key().into(), ev);
            c.rec_version = g.rec_version;
            // The parent's evidence items observed where the child applies.
            c.evidence = g
                .evidence
                .iter()
                .filter(|e| c.applies(&e.context))
                .cloned()
                .collect();
            c.last_used = clock;
            self.bump(if i == 0 { "narrowed" } else { "revised" });
            ops.push(PlannedOp::new(
                MemoryOp::Create {
                    record: c.record(self.ns.clone()),
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
        Ok(ops)
    }

    /// The second child of a split: where another value of the narrowing
    /// `kv`'s attribute is significantly negative, a revised guideline
    /// under that value (unless its decisions equal the parent's).
    fn revised_sibling(&self, g: &Guideline, kv: &str) -> Option<Child> {
        let attr = attr_of(kv);
        let (nk, ns) = g
            .by_context
            .iter()
            .filter(|(k, s)| {
                attr_of(k) == attr && **k != kv && s.n >= 2 && s.mean + s.se(self.floor()) < 0.0
            })
            .min_by(|a, b| a.1.mean.total_cmp(&b.1.mean))?;
        let revised = self.split_decisions(g, nk);
        if self
            .mode
            .same_decisions(&revised, &g.decisions, self.cfg.revise_gap)
        {
            return None;
        }
        let nval = nk.split_once('=').map(|x| x.1).unwrap_or("");
        let mut c = g.conditions.clone();
        c.insert(attr, nval.to_string());
        let flipped = Stats {
            mean: -ns.mean,
            ..*ns
        };
        Some((revised, c, flipped, "revise"))
    }

    /// Replace `g` by a revised candidate with `decisions`, inheriting its
    /// evidence.
    fn revise(
        &mut self,
        caller: &mut RoleCaller,
        g: &Guideline,
        decisions: BTreeMap<String, String>,
        why: String,
        at: LogicalTime,
        clock: u64,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let text = self.write(
            caller,
            "revise",
            &decisions,
            &g.conditions,
            vec![g.line()],
            why.clone(),
        )?;
        let mut c = Guideline::new(
            child_id(&g.id, "revise", 0, at),
            self.mode,
            decisions,
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
        c.evidence = g.evidence.clone();
        c.last_used = clock;
        self.bump("revised");
        Ok(vec![
            PlannedOp::new(
                MemoryOp::Create {
                    record: c.record(self.ns.clone()),
                },
                "revise",
                format!("revise of {}: {why}", g.id),
            ),
            PlannedOp::new(
                MemoryOp::Forget { id: g.id.clone() },
                "revise",
                "replaced by its revised candidate",
            ),
        ])
    }

    /// The revised decisions of a guideline whose evidence calls for a
    /// revision, and why (see the module docs).
    fn revision(&self, g: &Guideline) -> Option<(BTreeMap<String, String>, String)> {
        let p = g.primary();
        match self.mode {
            Mode::Generate => (self.cfg.restate
                && tentative(&g.text)
                && p.n >= self.cfg.promote_n
                && self.lcb(&p) > 0.0)
                .then(|| {
                    (
                        g.decisions.clone(),
                        format!(
                            "fitness {:+.3} ± {:.3} over {} credits: supported; restate it firmly",
                            p.mean,
                            p.se(self.floor()),
                            p.n
                        ),
                    )
                }),
            Mode::Predict => {
                let d = g.residual;
                (d.n >= self.cfg.promote_n && d.mean.abs() > self.cfg.revise_gap).then(|| {
                    (
                        self.refit(g, None),
                        format!(
                            "ratings drift {:+.2} stars from its estimate over {} credits (version {})",
                            d.mean, d.n, g.version
                        ),
                    )
                })
            }
        }
    }

    /// Crossover of complementary responsible guidelines (see the module
    /// docs); at most one per call.
    pub fn crossover(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        credited: &[CreditedGuideline],
        gone: &BTreeSet<MemoryId>,
        at: LogicalTime,
        clock: u64,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let good: Vec<Guideline> = credited
            .iter()
            .filter(|c| c.supported && !gone.contains(&c.id))
            .filter_map(|c| ctx.memory.get(&c.id).and_then(Guideline::read))
            .filter(|g| {
                g.mode == self.mode
                    && g.status == RecordStatus::Promoted
                    && g.decisions.len() == 1
                    && self.lcb(&g.primary()) > 0.0
            })
            .collect();
        let live = self.live(ctx);
        for (i, a) in good.iter().enumerate() {
            for b in &good[i + 1..] {
                if a.conditions != b.conditions
                    || a.decisions.keys().any(|k| b.decisions.contains_key(k))
                {
                    continue;
                }
                let mut decisions = a.decisions.clone();
                decisions.extend(b.decisions.clone());
                if live.iter().any(|g| {
                    g.conditions == a.conditions
                        && self
                            .mode
                            .same_decisions(&g.decisions, &decisions, self.cfg.revise_gap)
                }) {
                    continue;
                }
                let text = self.write(
                    caller,
                    "crossover",
                    &decisions,
                    &a.conditions,
                    vec![a.line(), b.line()],
                    "both responsible and supported in the same record".into(),
                )?;
                let mut c = Guideline::new(
                    MemoryId::new(format!("{}:cross@{}", self.prefix, at.0)),
                    self.mode,
                    decisions,
                    a.conditions.clone(),
                    text,
                    "crossover",
                    at,
                );
                c.parents = vec![a.id.as_str().to_string(), b.id.as_str().to_string()];
                let mut f = a.primary();
                f.merge(&b.primary());
                c.fitness.insert(self.mode.primary_key().into(), f);
                c.evidence = a.evidence.iter().chain(&b.evidence).cloned().collect();
                c.evidence.sort_by_key(|e| e.source);
                let excess = c.evidence.len().saturating_sub(self.cfg.evidence_keep);
                c.evidence.drain(..excess);
                c.last_used = clock;
                c.rec_version = a.rec_version.max(b.rec_version);
                self.bump("crossover");
                let mut ops = vec![PlannedOp::new(
                    MemoryOp::Create {
                        record: c.record(self.ns.clone()),
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

    /// Periodic abstraction over promoted siblings against the contexts of
    /// the recent valid records `recent` (H_t; see the module docs).
    pub fn abstraction(
        &mut self,
        caller: &mut RoleCaller,
        ctx: &PolicyCtx<'_>,
        recent: &[&BTreeMap<String, String>],
        pending: &[PlannedOp],
        at: LogicalTime,
        clock: u64,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let gone: BTreeSet<&MemoryId> = pending
            .iter()
            .filter(|o| matches!(o.op, MemoryOp::Forget { .. }))
            .map(|o| o.op.target())
            .collect();
        let live = self.live(ctx);
        let gs: Vec<&Guideline> = live
            .iter()
            .filter(|g| {
                g.status == RecordStatus::Promoted
                    && !gone.contains(&g.id)
                    && self.lcb(&g.primary()) > 0.0
            })
            .collect();
        // Siblings share what they decide (generation: the values;
        // prediction: the genres, the offsets compared below) and every
        // condition but one.
        let mut groups: BTreeMap<(String, String, String), Vec<&Guideline>> = BTreeMap::new();
        for g in &gs {
            let what = match self.mode {
                Mode::Generate => json!(g.decisions).to_string(),
                Mode::Predict => json!(g.decisions.keys().collect::<Vec<_>>()).to_string(),
            };
            for attr in g.conditions.keys() {
                let mut rest = g.conditions.clone();
                rest.remove(attr);
                groups
                    .entry((what.clone(), json!(rest).to_string(), attr.clone()))
                    .or_default()
                    .push(g);
            }
        }
        let mut ops = Vec::new();
        for (i, ((_, _, attr), sibs)) in groups.into_iter().enumerate() {
            if sibs.len() < 2
                || !sibs.iter().all(|s| {
                    self.mode
                        .same_decisions(&s.decisions, &sibs[0].decisions, self.cfg.revise_gap)
                })
            {
                continue;
            }
            let seen: BTreeSet<&String> = recent.iter().filter_map(|c| c.get(&attr)).collect();
            let covered: BTreeSet<&String> = sibs
                .iter()
                .filter_map(|g| g.conditions.get(&attr))
                .collect();
            if seen.len() < 2 || seen != covered {
                continue;
            }
            let mut conditions = sibs[0].conditions.clone();
            conditions.remove(&attr);
            let decisions = self.pool(&sibs);
            if live.iter().any(|g| {
                g.conditions == conditions
                    && self
                        .mode
                        .same_decisions(&g.decisions, &decisions, self.cfg.revise_gap)
            }) {
                continue;
            }
            let text = self.write(
                caller,
                "abstract",
                &decisions,
                &conditions,
                sibs.iter().map(|g| g.line()).collect(),
                format!("supported for every {attr} value seen in the recent records"),
            )?;
            let mut a = Guideline::new(
                MemoryId::new(format!("{}:abstract{i}:{attr}@{}", self.prefix, at.0)),
                self.mode,
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
            a.fitness.insert(self.mode.primary_key().into(), f);
            a.last_used = clock;
            self.bump("abstracted");
            ops.push(PlannedOp::new(
                MemoryOp::Create {
                    record: a.record(self.ns.clone()),
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

    /// The decisions of an abstraction over `sibs`: their shared values
    /// (generation), or per genre the evidence-weighted mean offset
    /// (prediction).
    fn pool(&self, sibs: &[&Guideline]) -> BTreeMap<String, String> {
        match self.mode {
            Mode::Generate => sibs
                .first()
                .map(|g| g.decisions.clone())
                .unwrap_or_default(),
            Mode::Predict => {
                let mut acc: BTreeMap<String, (f64, f64)> = BTreeMap::new();
                for g in sibs {
                    let w = g.primary().n.max(1) as f64;
                    for (d, v) in &g.decisions {
                        let e = acc.entry(d.clone()).or_default();
                        e.0 += w * parse_offset(v).unwrap_or(0.0);
                        e.1 += w;
                    }
                }
                acc.into_iter()
                    .map(|(d, (s, w))| (d, offset_value(s / w.max(1.0))))
                    .collect()
            }
        }
    }

    /// GovernAndSelect_B over the memory as it will be after `pending`:
    /// returns `pending` without its rejected candidates, then the
    /// expiration and capacity ops. `clock` is the usage clock (generation:
    /// the decision time; prediction: the user's decision count).
    pub fn govern(
        &mut self,
        ctx: &PolicyCtx<'_>,
        pending: Vec<PlannedOp>,
        clock: u64,
    ) -> Vec<PlannedOp> {
        let mut live: BTreeMap<MemoryId, Guideline> = self
            .live(ctx)
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect();
        let verdict = self.select_candidates(&pending, &mut live);
        let mut ops: Vec<PlannedOp> = pending
            .into_iter()
            .filter(|o| {
                let t = o.op.target();
                let void = matches!(o.op, MemoryOp::Forget { .. })
                    && REPLACING.contains(&o.label.as_str())
                    && verdict.kept.contains(t);
                !verdict.rejected.contains(t) && !void
            })
            .collect();
        ops.extend(self.expire(&mut live, clock));
        ops.extend(self.over_capacity(&live, &verdict.replaced));
        ops
    }

    /// Walk the pending ops in order over the live guidelines: candidates
    /// that are invalid, duplicate or conflicting are rejected; a parent
    /// whose every replacement was lost is kept (its `Forget` is void).
    fn select_candidates(
        &mut self,
        pending: &[PlannedOp],
        live: &mut BTreeMap<MemoryId, Guideline>,
    ) -> Verdict {
        let gap = self.cfg.revise_gap;
        let mode = self.mode;
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
        for o in pending {
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
                    let valid = c.mode == mode && mode.valid(&c.decisions, &c.conditions);
                    let not_parent =
                        |g: &Guideline| !c.parents.contains(&g.id.as_str().to_string());
                    // A revision shares its parent's decisions and
                    // conditions; it duplicates anything else that does.
                    let dup = live.values().any(|g| {
                        g.conditions == c.conditions
                            && mode.same_decisions(&g.decisions, &c.decisions, gap)
                            && not_parent(g)
                    });
                    let conflict = live.values().any(|g| {
                        g.conditions == c.conditions
                            && not_parent(g)
                            && mode.contradicts(&g.decisions, &c.decisions, gap)
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
        Verdict {
            rejected,
            kept,
            replaced,
        }
    }

    /// Expiration. Generation counts from creation for a seed never used;
    /// prediction's clock is the user's own decisions, so only the usage
    /// mark (set at creation) counts.
    fn expire(&mut self, live: &mut BTreeMap<MemoryId, Guideline>, clock: u64) -> Vec<PlannedOp> {
        let mode = self.mode;
        let mut ops = Vec::new();
        if self.cfg.expire_after > 0 {
            let horizon = clock.saturating_sub(self.cfg.expire_after);
            let expired: Vec<MemoryId> = live
                .values()
                .filter(|g| {
                    let seen = match mode {
                        Mode::Generate => g.last_used.max(g.created_at.0),
                        Mode::Predict => g.last_used,
                    };
                    seen < horizon
                })
                .map(|g| g.id.clone())
                .collect();
            for id in expired {
                live.remove(&id);
                self.bump("expired");
                ops.push(PlannedOp::new(
                    MemoryOp::Forget { id },
                    "expire",
                    format!(
                        "no traced use in the last {} decisions",
                        self.cfg.expire_after
                    ),
                ));
            }
        }
        ops
    }

    /// Capacity B: past it, the weakest go (provisional candidates first,
    /// then by lower confidence bound). A candidate that replaces a parent
    /// retired in this step takes its parent's place: it competes like an
    /// incumbent.
    fn over_capacity(
        &mut self,
        live: &BTreeMap<MemoryId, Guideline>,
        replaced: &BTreeSet<String>,
    ) -> Vec<PlannedOp> {
        let mut ops = Vec::new();
        if live.len() > self.cfg.capacity {
            // A candidate that replaces a parent retired in this step takes
            // its parent's place: it competes like an incumbent.
            let heir = |g: &Guideline| g.parents.iter().any(|p| replaced.contains(p));
            let floor = self.floor();
            let mut ranked: Vec<(bool, f64, MemoryId)> = live
                .values()
                .map(|g| {
                    (
                        g.status != RecordStatus::Provisional || heir(g),
                        lcb(&g.primary(), floor),
                        g.id.clone(),
                    )
                })
                .collect();
            ranked.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
            let excess = live.len() - self.cfg.capacity;
            for (_, s, id) in ranked.into_iter().take(excess) {
                self.bump("capacity_evicted");
                ops.push(PlannedOp::new(
                    MemoryOp::Forget { id },
                    "evict",
                    format!(
                        "capacity {} reached; weakest (lcb {s:+.3}) goes",
                        self.cfg.capacity
                    ),
                ));
            }
        }
        ops
    }
}

/// What [`Evolver::govern`]'s candidate selection decided.
struct Verdict {
    /// Candidates rejected (their ops are dropped).
    rejected: BTreeSet<MemoryId>,
    /// Parents whose replacement failed: their `Forget` is void.
    kept: BTreeSet<MemoryId>,
    /// Parents replaced in this step.
    replaced: BTreeSet<String>,
}

/// The evidence direction of a numeric contrast.
pub fn direction_of(x: f64) -> Direction {
    if x > 0.0 {
        Direction::Support
    } else if x < 0.0 {
        Direction::Counter
    } else {
        Direction::None
    }
}

/// TIDE's own reading of a guideline's wording: true when its text
/// hedges, by a lexicon of English hedging markers that TIDE keeps for
/// itself (may, might, maybe, perhaps, possibly, consider, optionally,
/// could, try). The revise step restates a tentatively worded guideline
/// whose credited evidence is significantly positive. It reads the text, as
/// a real system would; how often a sampling generator takes up a
/// tentative guideline is the world's behaviour, which TIDE never reads.
pub(crate) fn tentative(text: &str) -> bool {
    const MARKERS: [&str; 9] = [
        "may",
        "might",
        "maybe",
        "perhaps",
        "possibly",
        "consider",
        "optionally",
        "could",
        "try",
    ];
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| MARKERS.contains(&w))
}


/// A context key `attr=value`'s attribute.
fn attr_of(k: &str) -> String {
    k.split('=').next().unwrap_or("").to_string()
}

/// A child of a narrowing or split: decisions, conditions, the evidence it
/// inherits, and how it is written (`narrow` or `revise`).
type Child = (
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    Stats,
    &'static str,
);

#[cfg(test)]
mod tests {
    //! GovernAndSelect_B on hand-made pending ops: rejected refinements never
    //! retire their parent, and heirs keep their parent's place at capacity.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::super::generate::namespace;
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
        let mut counts = Counts::new();
        Evolver {
            cfg,
            mode: Mode::Generate,
            ns: namespace(),
            prefix: "tide:gen".into(),
            token: None,
            counts: &mut counts,
        }
        .govern(&ctx, pending, 100)
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
        let cfg = TideConfig::defaults().unwrap();
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
        let cfg = TideConfig::defaults().unwrap();
        let pending = vec![
            create(&cross, "crossover"),
            forget("g:a", "crossover"),
            forget("g:b", "crossover"),
        ];
        let out = run(&cfg, &m, pending);
        assert!(
            out.is_empty(),
            "conflict with g:x: nothing happens, {out:?}"
        );

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
            ..TideConfig::defaults().unwrap()
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

    // ---- the Predict space through the same operations ----

    fn pg(
        id: &str,
        genre: &str,
        offset: f64,
        cond: &[(&str, &str)],
        n: u64,
        mean: f64,
    ) -> Guideline {
        let mut g = g(id, "cta", "soft", cond, n, mean);
        g.mode = Mode::Predict;
        g.decisions = BTreeMap::from([(genre.to_string(), offset_value(offset))]);
        if let Some(s) = g.fitness.remove("ctr") {
            g.fitness.insert("error".into(), s);
        }
        g
    }

    fn stats(n: u64, mean: f64) -> Stats {
        let mut s = Stats::default();
        for k in 0..n {
            s.push(mean + if k % 2 == 0 { 0.01 } else { -0.01 });
        }
        s
    }

    fn pmemory(gs: &[&Guideline]) -> MemoryState {
        let mut m = MemoryState::new();
        for g in gs {
            m.apply(
                &MemoryOp::Create {
                    record: g.record(Namespace::user("u0")),
                },
                LogicalTime(0),
            )
            .unwrap();
        }
        m
    }

    fn with_evolver<T>(
        cfg: &TideConfig,
        mode: Mode,
        m: &MemoryState,
        f: impl FnOnce(&mut Evolver<'_>, &PolicyCtx<'_>, &mut RoleCaller) -> T,
    ) -> T {
        let catalog = Catalog { items: Vec::new() };
        let ctx = PolicyCtx {
            memory: m,
            catalog: &catalog,
            users: &[],
            now: LogicalTime(100),
        };
        let mut counts = Counts::new();
        let mut caller = RoleCaller::new(std::sync::Arc::new(evomem_llm::LlmHub::offline()));
        let mut ev = Evolver {
            cfg,
            mode,
            ns: match mode {
                Mode::Generate => namespace(),
                Mode::Predict => Namespace::user("u0"),
            },
            prefix: "tide:u0".into(),
            token: Some("u0"),
            counts: &mut counts,
        };
        f(&mut ev, &ctx, &mut caller)
    }

    fn created(ops: &[PlannedOp]) -> Vec<(String, Guideline)> {
        ops.iter()
            .filter_map(|o| match &o.op {
                MemoryOp::Create { record } => {
                    Guideline::read(record).map(|g| (o.label.clone(), g))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_rating_guideline_that_hurts_in_one_era_is_split_with_refitted_offsets() {
        let mut d = pg("p:drama", "Drama", 0.8, &[], 8, -0.05);
        d.by_context.insert("era=1990s".into(), stats(4, 0.3));
        d.by_context.insert("era=1970s".into(), stats(4, -0.4));
        d.residual_by_context
            .insert("era=1990s".into(), stats(4, 0.2));
        d.residual_by_context
            .insert("era=1970s".into(), stats(4, -1.6));
        let m = pmemory(&[&d]);
        let cfg = TideConfig::defaults().unwrap();
        let ops = with_evolver(&cfg, Mode::Predict, &m, |ev, ctx, caller| {
            ev.edit(caller, ctx, &d, LogicalTime(50), 7).unwrap()
        });
        let kids = created(&ops);
        assert_eq!(kids.len(), 2, "{ops:?}");
        let (l0, narrow) = &kids[0];
        let (l1, other) = &kids[1];
        assert!(l0 == "split" && l1 == "split");
        assert_eq!(narrow.conditions["era"], "1990s");
        assert_eq!(other.conditions["era"], "1970s");
        // 0.8 + 0.2·4/9 and 0.8 − 1.6·4/9: refitted on each era's drift.
        let off = |g: &Guideline| parse_offset(&g.decisions["Drama"]).unwrap();
        assert!(
            (off(narrow) - (0.8 + 0.2 * 4.0 / 9.0)).abs() < 1e-3,
            "{narrow:?}"
        );
        assert!(
            (off(other) - (0.8 - 1.6 * 4.0 / 9.0)).abs() < 1e-3,
            "{other:?}"
        );
        assert!(narrow.status == RecordStatus::Provisional && narrow.last_used == 7);
        assert_eq!(forgets(&ops), vec!["p:drama".to_string()]);
        // Through governance both children are placed and the parent goes.
        let out = with_evolver(&cfg, Mode::Predict, &m, |ev, ctx, _| ev.govern(ctx, ops, 7));
        assert_eq!(created(&out).len(), 2);
        assert_eq!(forgets(&out), vec!["p:drama".to_string()]);
    }

    #[test]
    fn predict_governance_rejects_near_duplicates_and_conflicts_and_expires_on_the_users_clock() {
        let a = pg("p:a", "Drama", 0.8, &[], 6, 0.2);
        let mut old = pg("p:old", "Comedy", -0.5, &[], 6, 0.2);
        old.last_used = 3;
        // Created at a global time far past the user's clock: the usage
        // mark alone must decide.
        old.created_at = LogicalTime(1000);
        let m = pmemory(&[&a, &old]);
        let cfg = TideConfig::defaults().unwrap();
        let mut near = pg("p:near", "Drama", 0.9, &[], 0, 0.0);
        near.status = RecordStatus::Provisional;
        near.last_used = 60;
        let mut far = pg("p:far", "Drama", -0.4, &[], 0, 0.0);
        far.status = RecordStatus::Provisional;
        far.last_used = 60;
        let out = with_evolver(&cfg, Mode::Predict, &m, |ev, ctx, _| {
            ev.govern(
                ctx,
                vec![create(&near, "candidate"), create(&far, "candidate")],
                60,
            )
        });
        // +0.9 is within revise_gap of +0.8 (a duplicate); −0.4 contradicts it.
        assert!(created(&out).is_empty(), "{out:?}");
        // The user's clock is 60 and Comedy was last used at 3: it expires
        // (expire_after 40); Drama (used at 100 by the fixture) does not.
        assert_eq!(forgets(&out), vec!["p:old".to_string()]);
        assert!(out.iter().any(|o| o.label == "expire"));

        // A narrowing whose offset is within revise_gap of a live twin is a
        // duplicate, not a conflict: the parent is still replaced.
        let parent = pg("p:p", "Drama", 0.8, &[], 6, -0.1);
        let twin = pg("p:t", "Drama", 0.85, &[("era", "1990s")], 6, 0.3);
        let m = pmemory(&[&parent, &twin]);
        let mut c = pg("p:p:narrow0", "Drama", 0.9, &[("era", "1990s")], 2, 0.2);
        c.status = RecordStatus::Provisional;
        c.parents = vec!["p:p".into()];
        let out = with_evolver(&cfg, Mode::Predict, &m, |ev, ctx, _| {
            ev.govern(ctx, vec![create(&c, "narrow"), forget("p:p", "narrow")], 0)
        });
        assert!(created(&out).is_empty());
        assert_eq!(forgets(&out), vec!["p:p".to_string()]);
    }

    #[test]
    fn abstraction_reads_only_the_recent_records_it_is_given() {
        let a = g("g:a", "style", "vivid", &[("audience", "pro")], 6, 0.3);
        let b = g("g:b", "style", "vivid", &[("audience", "family")], 6, 0.3);
        let m = memory(&[&a, &b]);
        let cfg = TideConfig::defaults().unwrap();
        let ctxs: Vec<BTreeMap<String, String>> = ["kids", "pro", "family", "pro"]
            .iter()
            .map(|v| BTreeMap::from([("audience".to_string(), v.to_string())]))
            .collect();
        let run = |recent: Vec<&BTreeMap<String, String>>| {
            with_evolver(&cfg, Mode::Generate, &m, |ev, ctx, caller| {
                ev.abstraction(caller, ctx, &recent, &[], LogicalTime(9), 9)
                    .unwrap()
            })
        };
        // The old `kids` record is outside the window: the siblings cover
        // every audience seen recently, so they are abstracted.
        let ops = run(ctxs[1..].iter().collect());
        let made = created(&ops);
        assert_eq!(made.len(), 1, "{ops:?}");
        assert!(made[0].1.conditions.is_empty());
        // Over the whole log they do not cover `kids`.
        assert!(run(ctxs.iter().collect()).is_empty());
    }

    #[test]
    fn two_supported_genre_guidelines_cross_over_into_one_compound() {
        let a = pg("p:a", "Drama", 0.8, &[], 6, 0.3);
        let b = pg("p:b", "Romance", 0.5, &[], 6, 0.3);
        let m = pmemory(&[&a, &b]);
        let cfg = TideConfig::defaults().unwrap();
        let credited = vec![
            CreditedGuideline {
                id: a.id.clone(),
                supported: true,
            },
            CreditedGuideline {
                id: b.id.clone(),
                supported: true,
            },
        ];
        let ops = with_evolver(&cfg, Mode::Predict, &m, |ev, ctx, caller| {
            ev.crossover(caller, ctx, &credited, &BTreeSet::new(), LogicalTime(9), 9)
                .unwrap()
        });
        let made = created(&ops);
        assert_eq!(made.len(), 1);
        let c = &made[0].1;
        assert_eq!(c.decisions.len(), 2);
        assert_eq!(c.offset_for(&["Romance".to_string()]), Some(0.5));
        let mut gone = forgets(&ops);
        gone.sort();
        assert_eq!(gone, vec!["p:a", "p:b"]);
    }
}
