//! `memrl`: a growing pool of trajectory memories with learned utilities
//! (MemRL, the baseline of `romerl-reduced-order-utility-memory`), and its
//! variants MemRL-4 (`memrl[cap=4]`) and MemRL+UCB (`memrl[ucb=true]`).
//!
//! - **Write.** Every finished task adds one memory: the task text (title and
//!   embedding), the trajectory, the outcome y, the efficiency ℓ, the time,
//!   `Q = Q_init = 0.5` and an update count of 0.
//! - **Retrieve.** Candidates are the memories whose cosine with the task is
//!   at least δ. Each is scored `0.5·z(sim) + 0.5·z(Q)`, z-scored over the
//!   candidates, and the top `k_ret = 10` are returned. With probability
//!   `ε = 0.01` the retrieved set is drawn at random from the candidates
//!   instead (a seeded draw per decision).
//! - **δ.** Adaptive, as in the paper's Table 5 note: the top-20% quantile
//!   of the pairwise cosine between task descriptions. `delta=auto` computes
//!   it over the distinct tasks seen so far (the arena passes the value for
//!   the whole setting); a number fixes it.
//! - **Update.** After reward r every retrieved memory gets
//!   `Q ← (1 − α)Q + αr`, α = 0.3.
//! - **MemRL-4** (`cap=4`): at most `cap` memories per task; once a task has
//!   `cap`, a new memory replaces the one with the fewest utility updates
//!   (ties: the oldest), the paper's feedback-aware replacement.
//! - **MemRL+UCB** (`ucb=true`): each candidate's score gets an exploration
//!   bonus `min(b_max, c_UCB·sqrt(ln(N + 1) / (n_i + 1)))` with N the
//!   decisions served so far and n_i the memory's updates; `c_UCB = 0.2`,
//!   `b_max = 0.3` (the paper's noise-injection settings). The paper gives
//!   the constants, not the bonus's form; this is the standard UCB1 form.

use crate::registry::{Capabilities, Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use crate::utility::{
    keys,
    defaults, pairwise_cosine_quantile, trajectory_record, z_scores, UtilityCore,
};
use evomem_core::{
    DecisionQuery, DecisionTag, Feedback, MemoryId, MemoryOp, PlannedOp,
    PolicyCtx, PolicyError, Recall,
};
use evomem_kit::EmbeddingCache;
use std::collections::BTreeMap;

/// The `memrl` family row.
pub const FAMILY: Family = Family {
    name: "memrl",
    summary: "MemRL: a growing pool of trajectory memories with learned utilities (cap=4: MemRL-4, ucb=true: MemRL+UCB)",
    keys: &[
        keys::K_RET,
        keys::ALPHA,
        keys::Q_INIT,
        Key {
            name: "epsilon",
            ty: KeyType::Number,
            default: "0.01",
            doc: "probability of a random retrieved set",
        },
        Key {
            name: "delta",
            ty: KeyType::Text,
            default: "auto",
            doc: "similarity threshold: a number, or auto (top-20% quantile of pairwise task cosines)",
        },
        Key {
            name: "cap",
            ty: KeyType::Count,
            default: "0",
            doc: "memories per task (0: unbounded; 4: MemRL-4, replacing the least-updated)",
        },
        Key {
            name: "ucb",
            ty: KeyType::Bool,
            default: "false",
            doc: "add the UCB exploration bonus to retrieval scores",
        },
        Key {
            name: "c_ucb",
            ty: KeyType::Number,
            default: "0.2",
            doc: "UCB coefficient",
        },
        Key {
            name: "b_max",
            ty: KeyType::Number,
            default: "0.3",
            doc: "largest UCB bonus per memory",
        },
    ],
    build,
    grids: &[Grid {
        name: "variants",
        doc: "MemRL, MemRL-4 and MemRL+UCB",
        specs: &["memrl", "memrl[cap=4]", "memrl[ucb=true]"],
    }],
    caps: Capabilities {
        decisions: &[DecisionTag::Act],
        lifecycle_timeline: &[],
        evidence_paths: false,
        reports_growth: false,
        collaborative: false,
        writes_memory: true,
    },
};

/// Most distinct task embeddings kept for the online δ estimate.
const DELTA_SAMPLE: usize = 600;

/// The similarity threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Delta {
    /// Estimated from the tasks seen so far.
    Auto,
    /// Fixed.
    Fixed(f64),
}

impl Delta {
    pub(crate) fn parse(policy: &str, spec: &PolicySpec) -> Result<Self, PolicyError> {
        match spec.params.get("delta").map(String::as_str) {
            None | Some("auto") => Ok(Delta::Auto),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|d| d.is_finite())
                .map(Delta::Fixed)
                .ok_or_else(|| {
                    PolicyError::Config(format!(
                        "{policy}: `delta` must be `auto` or a number, got `{v}`"
                    ))
                }),
        }
    }
}

fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn evomem_core::Policy>, PolicyError> {
    let cfg = MemRlConfig {
        epsilon: spec.get("epsilon", defaults::EPSILON)?,
        delta: Delta::parse("memrl", spec)?,
        cap: spec.get("cap", 0usize)?,
        ucb: spec.get("ucb", false)?,
        c_ucb: spec.get("c_ucb", 0.2)?,
        b_max: spec.get("b_max", 0.3)?,
    };
    let alpha: f64 = spec.get("alpha", defaults::ALPHA)?;
    let k_ret: usize = spec.get("k_ret", defaults::K_RET)?;
    if !(0.0..=1.0).contains(&alpha) || !(0.0..=1.0).contains(&cfg.epsilon) || k_ret == 0 {
        return Err(PolicyError::Config(format!(
            "memrl: need alpha and epsilon in [0, 1] and k_ret >= 1, got alpha={alpha}, epsilon={}, k_ret={k_ret}",
            cfg.epsilon
        )));
    }
    Ok(Box::new(MemRl {
        core: UtilityCore {
            policy: "memrl",
            embedder: deps.embedder.clone(),
            cache: EmbeddingCache::new(deps.embedder.dim()),
            alpha,
            q_init: spec.get("q_init", defaults::Q_INIT)?,
            k_ret,
            seed: deps.seed,
            decisions: 0,
            updates: 0,
            written: 0,
        },
        cfg,
        seen_tasks: BTreeMap::new(),
        replaced: 0,
        explored: 0,
    }))
}

#[derive(Debug, Clone, Copy)]
struct MemRlConfig {
    epsilon: f64,
    delta: Delta,
    cap: usize,
    ucb: bool,
    c_ucb: f64,
    b_max: f64,
}

/// The policy.
struct MemRl {
    core: UtilityCore,
    cfg: MemRlConfig,
    /// Distinct task embeddings seen (for `delta=auto`), by task id.
    seen_tasks: BTreeMap<String, Vec<f32>>,
    replaced: u64,
    explored: u64,
}

impl MemRl {
    fn delta(&self) -> f64 {
        match self.cfg.delta {
            Delta::Fixed(d) => d,
            Delta::Auto => {
                let vs: Vec<Vec<f32>> = self.seen_tasks.values().cloned().collect();
                pairwise_cosine_quantile(&vs, defaults::DELTA_QUANTILE, DELTA_SAMPLE)
                    .unwrap_or(f64::NEG_INFINITY)
            }
        }
    }
}

impl evomem_core::Policy for MemRl {
    fn name(&self) -> &str {
        "memrl"
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        let (task, qv) = self.core.query(q)?;
        if self.seen_tasks.len() < DELTA_SAMPLE {
            self.seen_tasks
                .entry(task.id.clone())
                .or_insert_with(|| qv.clone());
        }
        let delta = self.delta();
        let ns = [UtilityCore::namespace(ctx, Some(q.user))];
        let cands: Vec<_> = UtilityCore::similar(ctx, &ns, &qv)
            .into_iter()
            .filter_map(|(r, t, sim)| sim.filter(|s| *s >= delta).map(|s| (r, t, s)))
            .collect();
        let zs = z_scores(&cands.iter().map(|c| c.2).collect::<Vec<_>>());
        let zq = z_scores(&cands.iter().map(|c| c.1.q).collect::<Vec<_>>());
        let n = self.core.decisions as f64;
        let mut scored: Vec<(&evomem_core::MemoryRecord, f64)> = cands
            .iter()
            .enumerate()
            .map(|(i, (r, t, _))| {
                let mut s = 0.5 * zs[i] + 0.5 * zq[i];
                if self.cfg.ucb {
                    let bonus = self.cfg.c_ucb * ((n + 1.0).ln() / (t.updates as f64 + 1.0)).sqrt();
                    s += bonus.min(self.cfg.b_max);
                }
                (*r, s)
            })
            .collect();
        if self.core.draw(q.decision_id, 0x006d_656d_726c) < self.cfg.epsilon {
            // Exploration: a random set, ordered by a seeded key.
            self.explored += 1;
            let mut keyed: Vec<(f64, usize)> = (0..scored.len())
                .map(|i| (self.core.draw(q.decision_id, i as u64 + 1), i))
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            scored = keyed.into_iter().map(|(_, i)| scored[i]).collect();
            scored.truncate(self.core.k_ret);
        } else {
            self.core.top_k(&mut scored);
        }
        Ok(UtilityCore::recall(q, &scored))
    }

    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let mut ops = self.core.update_ops(ctx, fb);
        let Some(episode) = crate::utility::episode_of("memrl", fb)? else {
            return Ok(ops);
        };
        let ns = UtilityCore::namespace(ctx, fb.user);
        let success = fb.outcome.success.unwrap_or(false);
        if self.cfg.cap > 0 {
            // Updates as they will be once this feedback's ops are applied.
            let bumped: std::collections::BTreeSet<&MemoryId> =
                fb.trace.used.iter().map(|u| &u.id).collect();
            let nsv = [ns.clone()];
            let mut same: Vec<(u64, u64, MemoryId)> = UtilityCore::candidates(ctx, &nsv)
                .into_iter()
                .filter(|(_, t)| t.task_id == episode.task.id)
                .map(|(_, t)| {
                    let u = t.updates + u64::from(bumped.contains(&t.id));
                    (u, t.created_at, t.id)
                })
                .collect();
            same.sort();
            let excess = (same.len() + 1).saturating_sub(self.cfg.cap);
            for (u, _, id) in same.into_iter().take(excess) {
                self.replaced += 1;
                ops.push(PlannedOp::new(
                    MemoryOp::Forget { id },
                    "replace",
                    format!(
                        "task {} is at its cap of {}; the least-updated memory ({u} updates) makes room",
                        episode.task.id, self.cfg.cap
                    ),
                ));
            }
        }
        let emb = self.core.embedding(&episode.task.text)?;
        let id = MemoryId::new(format!(
            "traj:{}:{}:{}",
            ns.as_str(),
            episode.task.id,
            fb.decision_id
        ));
        let record = trajectory_record(
            id,
            ns,
            episode,
            success,
            self.core.q_init,
            emb,
            fb.observed_at,
        );
        self.core.written += 1;
        ops.push(PlannedOp::new(
            MemoryOp::Create { record },
            "write",
            format!(
                "new {} trajectory for task {}",
                if success { "success" } else { "failure" },
                episode.task.id
            ),
        ));
        Ok(ops)
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "decisions": self.core.decisions,
            "utility_updates": self.core.updates,
            "written": self.core.written,
            "replaced": self.replaced,
            "explored": self.explored,
            "delta": self.delta(),
        })
    }
}
