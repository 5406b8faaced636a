//! `romerl`: reduced-order utility memory (RoMeRL,
//! `romerl-reduced-order-utility-memory`, §4).
//!
//! Per task g, a fixed 2×2 state: outcome polarity (success +, failure −)
//! × dynamics (consolidated C, adaptive A), i.e. the coordinates PCC, PAC,
//! NCC and NAC. Each non-empty coordinate holds one representative
//! trajectory and the coordinate's utility Q. A new trajectory never adds a
//! utility variable: it updates or replaces a coordinate's representative,
//! which inherits the coordinate's Q as a warm start and resets `n_post`
//! (the engine's `Replace` op keeps id, utility and creation time).
//! Memory per task is therefore at most four records: O(1), where MemRL's
//! pool grows with every episode.
//!
//! **Retrieval.** The retrieval every trajectory policy shares
//! ([`crate::utility::Retrieval`], the same keys and defaults as MemRL):
//! the non-empty coordinates (of every task) whose cosine with the task is
//! at least δ are candidates, scored `(1 − ω_Q)·z(cos) + ω_Q·z(Q)` with
//! both z-scored over the candidates; the top `k_ret` are returned, or with
//! probability ε a random set. The paper's own form, raw scores over every
//! coordinate with no gate and no exploration, is
//! `romerl[delta=-1,epsilon=0,score=raw]` (reported as an ablation).
//! **Update.** After reward r every retrieved coordinate gets
//! `Q ← (1 − α)Q + αr` (α = 0.3, Q_init = 0.5, k_ret = 10, as MemRL).
//!
//! **What makes a trajectory consolidated or adaptive.** The paper does not
//! say exactly; this implementation (key `consolidate=evidence`, the
//! default) uses:
//!
//! - *PCC*: the success with the strongest long-horizon evidence — the
//!   answer (normalised SQL) that has succeeded most often on this task. A
//!   success with the PCC's answer adds one to its evidence.
//! - *PAC*: the most recent success whose answer differs from the PCC's. A
//!   success repeating the PAC's answer adds to the PAC's evidence, and when
//!   the PAC's evidence overtakes the PCC's the two swap contents (each
//!   coordinate keeps its own Q).
//! - *NCC*: the failure with the most diagnostic evidence — distinct error
//!   messages met plus statements that returned nothing
//!   ([`crate::utility::diagnostic_evidence`]); a failure repeating the
//!   NCC's answer adds one (a recurring mistake is itself diagnostic).
//! - *NAC*: the most recent failure whose answer differs from the NCC's; it
//!   swaps with the NCC when it is more diagnostic.
//!
//! **Nulled representatives** (the arena's noise injection): with the
//! shared `actionless=keep` (the default for every trajectory policy) a
//! representative without an action is a representative like any other.
//! With `actionless=replace`, each episode of the task cleans the task's
//! oldest nulled representative that the shared `replace_rule` admits
//! ([`crate::utility::nulled_to_clean`], the definition MemRL cleans by):
//! its coordinate counts as empty in the assignment below, so a trajectory
//! of its polarity that lands there replaces it (keeping the coordinate's
//! Q); when the episode's trajectory goes elsewhere (the other polarity
//! under `replace_rule=any`, or evidence for another coordinate), the
//! nulled representative is dropped. `replace_rule=same_polarity` (the
//! default) admits only trajectories of the representative's polarity;
//! `any` admits every trajectory of the task, as MemRL's rule did before
//! the key existed.
//!
//! `consolidate=first` keeps the first success and the first failure in the
//! consolidated coordinates for good (no swaps). The ablations of the
//! paper's Figure 5 drop a coordinate: `ncc=false` (failures go to NAC only)
//! and `pac=false` (a success that differs from the PCC is not kept).
//! `omega_q` is not given in the text we have (Table 5); 0.5 weighs
//! similarity and utility equally, as MemRL's retrieval does.

use crate::registry::{Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use crate::utility::{
    diagnostic_evidence, fields, keys, nulled_to_clean, signature, trajectory_record, Actionless,
    Retrieval, Retriever, TrajectoryRecord, UtilityCore,
};
use evomem_core::{
    DecisionQuery, Episode, Feedback, MemoryId, MemoryOp,
    MemoryRecord, Namespace, PlannedOp, PolicyCtx, PolicyError, Recall,
};
use evomem_kit::EmbeddingCache;
use serde_json::json;
use std::collections::BTreeMap;

/// The `romerl` family row.
pub const FAMILY: Family = Family {
    name: "romerl",
    kind: crate::registry::FamilyKind::Memory,
    summary: "RoMeRL: per task a fixed 2x2 utility state (PCC, PAC, NCC, NAC), retrieved by similarity plus utility",
    keys: &[
        keys::K_RET,
        keys::ALPHA,
        keys::Q_INIT,
        keys::EPSILON,
        keys::DELTA,
        keys::SCORE,
        keys::ACTIONLESS,
        keys::REPLACE_RULE,
        Key {
            name: "omega_q",
            ty: KeyType::Number,
            default: "0.5",
            doc: "weight of Q in the retrieval score (1-omega_q)*sim + omega_q*Q",
        },
        Key {
            name: "ncc",
            ty: KeyType::Bool,
            default: "true",
            doc: "keep the consolidated-failure coordinate (ablation: false)",
        },
        Key {
            name: "pac",
            ty: KeyType::Bool,
            default: "true",
            doc: "keep the adaptive-success coordinate (ablation: false)",
        },
        Key {
            name: "consolidate",
            ty: KeyType::Choice(&["evidence", "first"]),
            default: "evidence",
            doc: "what makes a trajectory consolidated: the strongest evidence (swaps allowed) or the first seen",
        },
    ],
    build,
    grids: &[
        Grid {
            name: "coordinates",
            doc: "the paper's Figure 5 ablations",
            specs: &["romerl", "romerl[ncc=false]", "romerl[pac=false]"],
        },
        Grid {
            name: "retrieval",
            doc: "the shared retrieval (gate, exploration, z-scores) against the paper's raw scores over every coordinate",
            specs: &["romerl", "romerl[delta=-1,epsilon=0,score=raw]"],
        },
        Grid {
            name: "actionless",
            doc: "nulled representatives kept like any other, or replaced by the task's next trajectory",
            specs: &["romerl", "romerl[actionless=replace]"],
        },
        Grid {
            name: "replace_rule",
            doc: "under actionless=replace, nulled representatives cleaned by a trajectory of the same outcome or by any",
            specs: &[
                "romerl[actionless=replace,replace_rule=same_polarity]",
                "romerl[actionless=replace,replace_rule=any]",
            ],
        },
    ],
    caps: evomem_core::family::ROMERL,
};

/// The four coordinates.
pub const COORDINATES: [&str; 4] = ["PCC", "PAC", "NCC", "NAC"];

fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn evomem_core::Policy>, PolicyError> {
    let alpha: f64 = spec.value("alpha")?;
    let omega_q: f64 = spec.value("omega_q")?;
    let k_ret: usize = spec.value("k_ret")?;
    if !(0.0..=1.0).contains(&alpha) || !(0.0..=1.0).contains(&omega_q) || k_ret == 0 {
        return Err(PolicyError::Config(format!(
            "romerl: need alpha and omega_q in [0, 1] and k_ret >= 1, got alpha={alpha}, omega_q={omega_q}, k_ret={k_ret}"
        )));
    }
    let consolidate: String = spec.value("consolidate")?;
    let retrieval = Retrieval::from_spec("romerl", spec)?;
    Ok(Box::new(RoMeRl {
        retriever: Retriever::new(retrieval),
        core: UtilityCore {
            policy: "romerl",
            embedder: deps.embedder.clone(),
            cache: EmbeddingCache::new(deps.embedder.dim()),
            alpha,
            q_init: spec.value("q_init")?,
            k_ret,
            seed: deps.seed,
            decisions: 0,
            updates: 0,
            written: 0,
        },
        omega_q,
        ncc: spec.value("ncc")?,
        pac: spec.value("pac")?,
        swaps: consolidate == "evidence",
        moves: BTreeMap::new(),
    }))
}

/// The policy.
struct RoMeRl {
    core: UtilityCore,
    /// The shared retrieval (δ gate, ε, z-scores; its task sample).
    retriever: Retriever,
    omega_q: f64,
    ncc: bool,
    pac: bool,
    /// `consolidate=evidence`: consolidated and adaptive may swap.
    swaps: bool,
    /// How often each transition happened (for stats).
    moves: BTreeMap<&'static str, u64>,
}

/// A coordinate's record id: namespaced, so agents never share a slot.
fn coord_id(ns: &Namespace, task: &str, coord: &str) -> MemoryId {
    MemoryId::new(format!("coord:{}:{task}:{coord}", ns.as_str()))
}

/// One task's coordinates as they stand.
struct TaskState<'m> {
    slots: BTreeMap<&'static str, (&'m MemoryRecord, TrajectoryRecord)>,
}

impl RoMeRl {
    fn bump(&mut self, what: &'static str) {
        *self.moves.entry(what).or_insert(0) += 1;
    }

    /// The record for `episode` as the representative of `coord` (with
    /// evidence 1): cumulative counts carried over from the coordinate's
    /// `current` record.
    fn representative(
        &mut self,
        ns: &Namespace,
        (coord, current): (&'static str, Option<&MemoryRecord>),
        episode: &Episode,
        success: bool,
        diagnostic: u64,
        at: evomem_core::LogicalTime,
    ) -> Result<MemoryRecord, PolicyError> {
        let emb = self.core.embedding(&episode.task.text)?;
        let mut r = trajectory_record(
            coord_id(ns, &episode.task.id, coord),
            ns.clone(),
            episode,
            success,
            self.core.q_init,
            emb,
            at,
        )
        .with_field(fields::COORDINATE, json!(coord))
        .with_field(fields::DIAGNOSTIC, json!(diagnostic));
        r.evidence = 1;
        if let Some(cur) = current {
            for k in [fields::UPDATES, fields::POSITIVE] {
                if let Some(v) = cur.fields.get(k) {
                    r.fields.insert(k.to_string(), v.clone());
                }
            }
        }
        Ok(r)
    }

    /// Put `record` in its coordinate: create it, or replace the current
    /// representative (which keeps the coordinate's Q).
    fn place(
        &mut self,
        record: MemoryRecord,
        exists: bool,
        why: String,
    ) -> PlannedOp {
        self.core.written += 1;
        if exists {
            PlannedOp::new(
                MemoryOp::Replace {
                    id: record.id.clone(),
                    record,
                },
                "replace",
                why,
            )
        } else {
            PlannedOp::new(MemoryOp::Create { record }, "write", why)
        }
    }

    /// Swap the contents of two filled coordinates (each keeps its Q).
    fn swap(
        &mut self,
        a: (&MemoryRecord, &'static str),
        b: (&MemoryRecord, &'static str),
        why: &str,
    ) -> Vec<PlannedOp> {
        let moved = |from: &MemoryRecord, to: &MemoryRecord, coord: &str| {
            let mut r = from.clone();
            r.id = to.id.clone();
            r.fields.insert(fields::COORDINATE.to_string(), json!(coord));
            r.fields.insert(fields::N_POST.to_string(), json!(0));
            for k in [fields::UPDATES, fields::POSITIVE] {
                match to.fields.get(k) {
                    Some(v) => r.fields.insert(k.to_string(), v.clone()),
                    None => r.fields.remove(k),
                };
            }
            r
        };
        let ra = moved(b.0, a.0, a.1);
        let rb = moved(a.0, b.0, b.1);
        vec![
            PlannedOp::new(
                MemoryOp::Replace {
                    id: ra.id.clone(),
                    record: ra,
                },
                "swap",
                why.to_string(),
            ),
            PlannedOp::new(
                MemoryOp::Replace {
                    id: rb.id.clone(),
                    record: rb,
                },
                "swap",
                why.to_string(),
            ),
        ]
    }

    fn add_evidence(id: &MemoryId, diagnostic: Option<u64>, why: &str) -> Vec<PlannedOp> {
        let mut ops = vec![PlannedOp::new(
            MemoryOp::AdjustStrength {
                id: id.clone(),
                delta: 0.0,
                evidence_delta: 1,
            },
            "evidence",
            why.to_string(),
        )];
        if let Some(d) = diagnostic {
            ops.push(PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: id.clone(),
                    fields: [(fields::DIAGNOSTIC.to_string(), json!(d))]
                        .into_iter()
                        .collect(),
                    text: None,
                    embedding: None,
                },
                "evidence",
                why.to_string(),
            ));
        }
        ops
    }

    /// Assign `episode` to the task's coordinates. `clean` is the nulled
    /// representative this episode cleans (`actionless=replace`), whose
    /// coordinate counts as empty; `None` under `keep` or when there is
    /// none.
    fn assign(
        &mut self,
        ns: &Namespace,
        st: &TaskState<'_>,
        episode: &Episode,
        (success, clean): (bool, Option<&MemoryId>),
        at: evomem_core::LogicalTime,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let sig = signature(episode.answer.as_deref());
        let (cons, adap, use_adap) = if success {
            ("PCC", "PAC", self.pac)
        } else {
            ("NCC", "NAC", true)
        };
        let use_cons = success || self.ncc;
        let diag = if success { 0 } else { diagnostic_evidence(episode) };
        // `actionless=replace`: the nulled representative this episode
        // cleans holds nothing to act on, so its coordinate is treated as
        // empty and a trajectory of its polarity that lands there replaces
        // it (keeping the coordinate's Q); `feedback` drops it when the
        // trajectory goes elsewhere. Every other representative, nulled or
        // not, is a representative like any other.
        let usable = |t: &TrajectoryRecord| t.has_action || clean != Some(&t.id);
        let c = st.slots.get(cons).filter(|(_, t)| usable(t));
        let a = st.slots.get(adap).filter(|(_, t)| usable(t));
        let c_exists = st.slots.contains_key(cons);
        let a_exists = st.slots.contains_key(adap);
        let task = &episode.task.id;
        // Without a consolidated coordinate, every trajectory of this
        // polarity is the adaptive one.
        if !use_cons {
            let cur = st.slots.get(adap).map(|x| x.0);
            let rec = self.representative(ns, (adap, cur), episode, success, diag, at)?;
            self.bump("adaptive");
            return Ok(vec![self.place(rec, a_exists, format!("{adap} of {task}: most recent"))]);
        }
        let Some((c_rec, c_t)) = c else {
            let cur = st.slots.get(cons).map(|x| x.0);
            let rec = self.representative(ns, (cons, cur), episode, success, diag, at)?;
            self.bump("consolidated_first");
            let why = if c_exists {
                format!("{cons} of {task}: its representative had no action")
            } else {
                format!("{cons} of {task}: first")
            };
            return Ok(vec![self.place(rec, c_exists, why)]);
        };
        if c_t.signature == sig {
            self.bump("consolidated_evidence");
            let d = (!success).then_some(c_t.diagnostic + 1);
            return Ok(Self::add_evidence(
                &c_t.id,
                d,
                &format!("{cons} of {task}: the same answer again"),
            ));
        }
        if !use_adap {
            self.bump("dropped");
            return Ok(Vec::new());
        }
        // Differs from the consolidated representative: the adaptive one.
        if let Some((a_rec, a_t)) = a {
            if a_t.signature == sig {
                let mut ops = Self::add_evidence(
                    &a_t.id,
                    (!success).then_some(a_t.diagnostic.max(diag)),
                    &format!("{adap} of {task}: the same answer again"),
                );
                self.bump("adaptive_evidence");
                let overtakes = if success {
                    a_t.evidence + 1 > c_t.evidence
                } else {
                    a_t.diagnostic.max(diag) > c_t.diagnostic
                };
                if self.swaps && overtakes {
                    // Apply the evidence first, then swap the updated contents.
                    let mut promoted = (*a_rec).clone();
                    promoted.evidence += 1;
                    if !success {
                        promoted
                            .fields
                            .insert(fields::DIAGNOSTIC.to_string(), json!(a_t.diagnostic.max(diag)));
                    }
                    self.bump("swap");
                    ops.extend(self.swap(
                        (c_rec, cons),
                        (&promoted, adap),
                        &format!("{task}: {adap} overtook {cons}"),
                    ));
                }
                return Ok(ops);
            }
        }
        let cur = st.slots.get(adap).map(|x| x.0);
        let rec = self.representative(ns, (adap, cur), episode, success, diag, at)?;
        self.bump("adaptive");
        let mut ops = vec![self.place(
            rec.clone(),
            a_exists,
            format!("{adap} of {task}: most recent, differs from {cons}"),
        )];
        if self.swaps && !success && diag > c_t.diagnostic {
            self.bump("swap");
            ops.extend(self.swap(
                (c_rec, cons),
                (&rec, adap),
                &format!("{task}: the new failure is more diagnostic than {cons}"),
            ));
        }
        Ok(ops)
    }
}

impl evomem_core::Policy for RoMeRl {
    fn name(&self) -> &str {
        "romerl"
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        let (task, qv) = self.core.query(q)?;
        self.retriever.note(task.id.clone(), &qv);
        let delta = self.retriever.delta();
        let ns = [UtilityCore::namespace(ctx, Some(q.user))];
        let cands = Retriever::gate(UtilityCore::similar(ctx, &ns, &qv), delta);
        let scored = self
            .retriever
            .rank(&self.core, q, &cands, self.omega_q, |_| 0.0);
        Ok(UtilityCore::recall(q, &scored))
    }

    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        // Assignment reads the coordinates as they stand before this
        // feedback's Q updates; the updates touch only Q and counts, which a
        // replacement carries over, so the order of the two op groups is
        // safe: updates first, then assignment.
        let mut ops = self.core.update_ops(ctx, fb);
        let Some(episode) = crate::utility::episode_of("romerl", fb)? else {
            return Ok(ops);
        };
        let ns = UtilityCore::namespace(ctx, fb.user);
        let nsv = [ns.clone()];
        let mut st = TaskState {
            slots: BTreeMap::new(),
        };
        for c in COORDINATES {
            if let Some(r) = ctx.memory.get_in(&coord_id(&ns, &episode.task.id, c), &nsv) {
                if let Some(t) = TrajectoryRecord::read(r) {
                    st.slots.insert(c, (r, t));
                }
            }
        }
        // Counts bumped by this feedback's updates must survive a Replace.
        let bumped: BTreeMap<MemoryId, ()> =
            fb.trace.used.iter().map(|u| (u.id.clone(), ())).collect();
        let success = fb.outcome.success.unwrap_or(false);
        let clean: Option<MemoryId> = match self.retriever.cfg.actionless {
            Actionless::Keep => None,
            Actionless::Replace => {
                let slots: Vec<(&MemoryRecord, TrajectoryRecord)> =
                    st.slots.values().map(|(r, t)| (*r, t.clone())).collect();
                let rule = self.retriever.cfg.replace_rule;
                nulled_to_clean(&slots, &episode.task.id, success, rule).map(|(_, t)| t.id.clone())
            }
        };
        let mut assigned = self.assign(&ns, &st, episode, (success, clean.as_ref()), fb.observed_at)?;
        if let Some(id) = clean {
            let overwritten = assigned.iter().any(|o| {
                matches!(&o.op, MemoryOp::Replace { id: w, .. } if *w == id)
                    || matches!(&o.op, MemoryOp::Create { record } if record.id == id)
            });
            if !overwritten {
                self.bump("nulled_dropped");
                assigned.push(PlannedOp::new(
                    MemoryOp::Forget { id },
                    "replace",
                    format!(
                        "{}: a representative with no action is cleaned by this {} trajectory (actionless=replace, replace_rule={})",
                        episode.task.id,
                        if success { "success" } else { "failure" },
                        self.retriever.cfg.replace_rule.name()
                    ),
                ));
            }
        }
        for op in &mut assigned {
            if let MemoryOp::Replace { id, record } = &mut op.op {
                if bumped.contains_key(id) {
                    let r = fb.outcome.reward;
                    let inc = |v: Option<&serde_json::Value>, by: u64| {
                        json!(v.and_then(serde_json::Value::as_u64).unwrap_or(0) + by)
                    };
                    let u = inc(record.fields.get(fields::UPDATES), 1);
                    let p = inc(record.fields.get(fields::POSITIVE), u64::from(r > 0.0));
                    record.fields.insert(fields::UPDATES.to_string(), u);
                    record.fields.insert(fields::POSITIVE.to_string(), p);
                }
            }
        }
        ops.extend(assigned);
        Ok(ops)
    }

    fn stats(&self) -> serde_json::Value {
        json!({
            "decisions": self.core.decisions,
            "utility_updates": self.core.updates,
            "written": self.core.written,
            "transitions": self.moves,
            "explored": self.retriever.explored,
            "delta": self.retriever.delta(),
        })
    }
}
