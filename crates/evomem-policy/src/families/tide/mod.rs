//! `tide`: TIDE, temporal, semantic and responsibility credit with
//! capacity-bounded governance (`tide-recommendation-feedback-evolves-memory`).
//!
//! Memories are guidelines ([`guideline`]): a content decision with its
//! applicability conditions, fitness evidence per objective, provenance,
//! version and status (provisional candidate or promoted incumbent). The
//! policy serves two decision kinds:
//!
//! - `Generate` ([`generate`]): the generation arena. A frozen generator
//!   ([`generator`], role `tide_generate`) composes a material from the
//!   retrieved guidelines; staged feedback (exposure, click, conversion)
//!   goes through C_temp, C_sem, responsibility and GovernAndSelect_B.
//! - `Predict` ([`predict`]): the delayed rating stream; the same credits on
//!   a rating estimate.
//!
//! Both paths hand their credited guidelines to the same candidate
//! operations (narrow, split, revise, crossover, abstraction) and the same
//! GovernAndSelect_B ([`evolve`]); only the decision space differs
//! ([`guideline::Mode`]).
//!
//! **Keys** (the paper's where it gives them; otherwise chosen here and
//! documented in the row): `cf` and `trace` are the paper's ablations
//! (Figure 4b); `attribution=retrieved` is the Retrieved-Memory Attribution
//! baseline (every retrieved memory gets credit), `edit=none` the static
//! reference and `edit=append` append-only memory — they share every other
//! step so that the comparison isolates the one difference.

pub mod evolve;
pub mod generate;
pub mod generator;
pub mod guideline;
pub mod predict;
pub mod roles;
pub mod semantic;
pub mod temporal;

use crate::registry::{Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use evomem_core::{
    DecisionKind, DecisionQuery, Feedback, Interaction, PlannedOp, PolicyCtx,
    PolicyError, Recall,
};
use evomem_kit::RoleCaller;

/// The `tide` family row.
pub const FAMILY: Family = Family {
    name: "tide",
    kind: crate::registry::FamilyKind::Memory,
    summary: "TIDE: guideline memory evolved by temporal, semantic and responsibility credit (generate, predict)",
    keys: &[
        Key { name: "cf", ty: KeyType::Bool, default: "true", doc: "responsibility needs the leave-one-out counterfactual replay (paper ablation: false)" },
        Key { name: "trace", ty: KeyType::Bool, default: "true", doc: "responsibility reads the usage trace; false: every retrieved memory counts as used (paper ablation)" },
        Key { name: "capacity", ty: KeyType::Count, default: "12", doc: "B, most guidelines per namespace after GovernAndSelect (chosen: the paper gives no value)" },
        Key { name: "attribution", ty: KeyType::Choice(&["tide", "retrieved"]), default: "tide", doc: "tide: Used and Align and CF; retrieved: every retrieved memory gets credit (baseline)" },
        Key { name: "edit", ty: KeyType::Choice(&["evolve", "append", "none"]), default: "evolve", doc: "evolve: candidates and governance; append: only add guidelines from winning materials; none: static memory" },
        Key { name: "k_ret", ty: KeyType::Count, default: "8", doc: "guidelines retrieved per decision" },
        Key { name: "min_controls", ty: KeyType::Count, default: "3", doc: "fewest matched controls for z_sem = 1" },
        Key { name: "z_min", ty: KeyType::Number, default: "1.0", doc: "|contrast / se| a decision contrast needs to count as stable" },
        Key { name: "maturity", ty: KeyType::Count, default: "4", doc: "logical steps after the decision before conversions are mature (C_temp)" },
        Key { name: "cf_eps", ty: KeyType::Number, default: "0.05", doc: "predict: a leave-one-out replay that moves the estimate this much changes the decision" },
        Key { name: "revise_gap", ty: KeyType::Number, default: "0.25", doc: "predict: stars of mean drift (rating minus estimate) after promote_n credits that make a revised candidate; also the tolerance within which two offsets are the same decision (duplicates, conflicts; chosen)" },
        Key { name: "se_floor", ty: KeyType::Number, default: "0.3", doc: "generate: prior standard deviation flooring the standard error of fitness evidence (logit units; chosen)" },
        Key { name: "se_floor_predict", ty: KeyType::Number, default: "0.5", doc: "predict: prior standard deviation flooring the standard error of fitness and novelty evidence (stars; chosen)" },
        Key { name: "conflict_z", ty: KeyType::Number, default: "2.0", doc: "generate: objectives conflict (z_sem = 0) when two material fitnesses lie beyond this many standard errors with opposite signs (chosen)" },
        Key { name: "evidence_keep", ty: KeyType::Count, default: "8", doc: "most recent evidence items e = (d, c, s) a guideline keeps (chosen)" },
        Key { name: "abstract_window", ty: KeyType::Count, default: "100", doc: "valid recent records H_t periodic abstraction reads (generate: the policy's log; predict: the user's matured ratings; chosen)" },
        Key { name: "promote_n", ty: KeyType::Count, default: "3", doc: "credits before a provisional candidate can be promoted (and before a revision)" },
        Key { name: "evict_n", ty: KeyType::Count, default: "3", doc: "credits before negative evidence can evict" },
        Key { name: "expire_after", ty: KeyType::Count, default: "40", doc: "decisions without a traced use after which a guideline expires (predict: the user's own decisions; 0: never)" },
        Key { name: "abstract_every", ty: KeyType::Count, default: "30", doc: "matured records between periodic abstractions (predict: the user's own; 0: never)" },
        Key { name: "shrink", ty: KeyType::Number, default: "5", doc: "pseudo-counts shrinking means toward their prior" },
        Key { name: "novel_min", ty: KeyType::Count, default: "4", doc: "labels of confirmed novel evidence before a parentless candidate" },
        Key { name: "novel_offset", ty: KeyType::Number, default: "0.3", doc: "predict: smallest |mean residual| worth a new guideline" },
        Key { name: "restate", ty: KeyType::Bool, default: "true", doc: "generate: a tentatively worded guideline whose credited evidence is significantly positive is revised into a firm statement (a provisional candidate replacing it)" },
    ],
    build,
    grids: &[
        Grid {
            name: "ablations",
            doc: "the paper's Figure 4(b): without counterfactual replay, without usage traces",
            specs: &["tide", "tide[cf=false]", "tide[trace=false]"],
        },
        Grid {
            name: "arena-a",
            doc: "the generation arena's methods: static, append-only, retrieved-memory attribution, TIDE and its ablations",
            specs: &[
                "tide[edit=none]",
                "tide[edit=append]",
                "tide[attribution=retrieved]",
                "tide",
                "tide[cf=false]",
                "tide[trace=false]",
            ],
        },
    ],
    caps: evomem_core::family::TIDE,
};

/// Who gets credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attribution {
    /// Used ∧ Align ∧ CF.
    Tide,
    /// Every retrieved memory (baseline).
    Retrieved,
}

/// What feedback may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// Candidates and governance.
    Evolve,
    /// Only add.
    Append,
    /// Nothing (static memory).
    None,
}

/// Resolved keys (see the family row).
#[derive(Debug, Clone, PartialEq)]
pub struct TideConfig {
    /// `cf`.
    pub cf: bool,
    /// `trace`.
    pub trace: bool,
    /// `capacity` (B).
    pub capacity: usize,
    /// `attribution`.
    pub attribution: Attribution,
    /// `edit`.
    pub edit: Edit,
    /// `k_ret`.
    pub k_ret: usize,
    /// `min_controls`.
    pub min_controls: usize,
    /// `z_min`.
    pub z_min: f64,
    /// `maturity`.
    pub maturity: u64,
    /// `cf_eps`.
    pub cf_eps: f64,
    /// `promote_n`.
    pub promote_n: u64,
    /// `evict_n`.
    pub evict_n: u64,
    /// `expire_after`.
    pub expire_after: u64,
    /// `abstract_every`.
    pub abstract_every: u64,
    /// `shrink`.
    pub shrink: f64,
    /// `novel_min`.
    pub novel_min: u64,
    /// `novel_offset`.
    pub novel_offset: f64,
    /// `restate`.
    pub restate: bool,
    /// `revise_gap`.
    pub revise_gap: f64,
    /// `se_floor`.
    pub se_floor: f64,
    /// `se_floor_predict`.
    pub se_floor_predict: f64,
    /// `conflict_z`.
    pub conflict_z: f64,
    /// `evidence_keep`.
    pub evidence_keep: usize,
    /// `abstract_window`.
    pub abstract_window: usize,
}

impl TideConfig {
    /// Read the keys of `spec` (already checked against the row).
    pub fn from_spec(spec: &PolicySpec) -> Result<Self, PolicyError> {
        let cfg = Self {
            cf: spec.value("cf")?,
            trace: spec.value("trace")?,
            capacity: spec.value("capacity")?,
            attribution: match spec.value::<String>("attribution")?.as_str() {
                "retrieved" => Attribution::Retrieved,
                "tide" => Attribution::Tide,
                other => return Err(bad_choice("attribution", other)),
            },
            edit: match spec.value::<String>("edit")?.as_str() {
                "append" => Edit::Append,
                "none" => Edit::None,
                "evolve" => Edit::Evolve,
                other => return Err(bad_choice("edit", other)),
            },
            k_ret: spec.value("k_ret")?,
            min_controls: spec.value("min_controls")?,
            z_min: spec.value("z_min")?,
            maturity: spec.value("maturity")?,
            cf_eps: spec.value("cf_eps")?,
            promote_n: spec.value("promote_n")?,
            evict_n: spec.value("evict_n")?,
            expire_after: spec.value("expire_after")?,
            abstract_every: spec.value("abstract_every")?,
            shrink: spec.value("shrink")?,
            novel_min: spec.value("novel_min")?,
            novel_offset: spec.value("novel_offset")?,
            restate: spec.value("restate")?,
            revise_gap: spec.value("revise_gap")?,
            se_floor: spec.value("se_floor")?,
            se_floor_predict: spec.value("se_floor_predict")?,
            conflict_z: spec.value("conflict_z")?,
            evidence_keep: spec.value("evidence_keep")?,
            abstract_window: spec.value("abstract_window")?,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Every key's range; an error names the first key out of range.
    fn check(&self) -> Result<(), PolicyError> {
        let nonneg = |x: f64| x.is_finite() && x >= 0.0;
        let rules: [(&str, bool, String, &str); 11] = [
            (
                "capacity",
                self.capacity >= 1,
                self.capacity.to_string(),
                ">= 1",
            ),
            ("k_ret", self.k_ret >= 1, self.k_ret.to_string(), ">= 1"),
            (
                "shrink",
                nonneg(self.shrink),
                self.shrink.to_string(),
                ">= 0",
            ),
            ("z_min", nonneg(self.z_min), self.z_min.to_string(), ">= 0"),
            (
                "cf_eps",
                nonneg(self.cf_eps),
                self.cf_eps.to_string(),
                ">= 0",
            ),
            (
                "revise_gap",
                nonneg(self.revise_gap),
                self.revise_gap.to_string(),
                ">= 0",
            ),
            (
                "se_floor",
                nonneg(self.se_floor),
                self.se_floor.to_string(),
                ">= 0",
            ),
            (
                "se_floor_predict",
                nonneg(self.se_floor_predict),
                self.se_floor_predict.to_string(),
                ">= 0",
            ),
            (
                "conflict_z",
                self.conflict_z.is_finite() && self.conflict_z > 0.0,
                self.conflict_z.to_string(),
                "> 0",
            ),
            (
                "evidence_keep",
                self.evidence_keep >= 1,
                self.evidence_keep.to_string(),
                ">= 1",
            ),
            (
                "abstract_window",
                self.abstract_window >= 2,
                self.abstract_window.to_string(),
                ">= 2",
            ),
        ];
        match rules.into_iter().find(|r| !r.1) {
            Some((key, _, got, need)) => Err(PolicyError::Config(format!(
                "tide: key `{key}` must be {need} (got {got})"
            ))),
            None => Ok(()),
        }
    }

    /// The standard-error floor of `mode`'s evidence (`se_floor`,
    /// `se_floor_predict`).
    pub fn floor(&self, mode: guideline::Mode) -> f64 {
        match mode {
            guideline::Mode::Generate => self.se_floor,
            guideline::Mode::Predict => self.se_floor_predict,
        }
    }
}

impl TideConfig {
    /// Every key at its row's default.
    pub fn defaults() -> Result<Self, PolicyError> {
        Self::from_spec(&PolicySpec::named("tide"))
    }
}

fn bad_choice(key: &str, value: &str) -> PolicyError {
    PolicyError::Config(format!("tide: bad value `{value}` for `{key}`"))
}

fn build(
    spec: &PolicySpec,
    deps: &PolicyDeps,
) -> Result<Box<dyn evomem_core::Policy>, PolicyError> {
    Ok(Box::new(Tide::new(
        TideConfig::from_spec(spec)?,
        RoleCaller::new(deps.llm.clone()),
    )))
}

/// The policy.
pub struct Tide {
    cfg: TideConfig,
    caller: RoleCaller,
    predict: predict::PredictState,
    generate: generate::GenerateState,
}

impl Tide {
    /// A policy with `cfg`, calling its roles through `caller`.
    pub fn new(cfg: TideConfig, caller: RoleCaller) -> Self {
        Self {
            cfg,
            caller,
            predict: predict::PredictState::default(),
            generate: generate::GenerateState::default(),
        }
    }
}

impl evomem_core::Policy for Tide {
    fn name(&self) -> &str {
        "tide"
    }

    fn observe(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if let Some(r) = event.rating {
            self.predict
                .record_label(event.user, event.item, f64::from(r));
        }
        Ok(Vec::new())
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        match &q.kind {
            DecisionKind::Predict { item } => self.predict.recall(&self.cfg, ctx, q, *item),
            DecisionKind::Generate { request } => self.generate.recall(&self.cfg, ctx, q, request),
            DecisionKind::Rank { .. } | DecisionKind::Act { .. } => Err(PolicyError::Unsupported {
                policy: "tide".into(),
                decision: q.tag(),
            }),
        }
    }

    fn feedback(
        &mut self,
        ctx: &PolicyCtx<'_>,
        fb: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        if fb.outcome.value.is_some() {
            self.predict.feedback(&self.cfg, &mut self.caller, ctx, fb)
        } else {
            self.generate.feedback(&self.cfg, &mut self.caller, ctx, fb)
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "predict": self.predict.stats(),
            "generate": self.generate.stats(),
            "role_calls": self.caller.calls(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_bad_value_is_an_error_naming_its_key() {
        for (spec, key) in [
            ("tide[revise_gap=-1]", "revise_gap"),
            ("tide[se_floor=-0.1]", "se_floor"),
            ("tide[se_floor_predict=-1]", "se_floor_predict"),
            ("tide[conflict_z=0]", "conflict_z"),
            ("tide[evidence_keep=0]", "evidence_keep"),
            ("tide[abstract_window=1]", "abstract_window"),
            ("tide[capacity=0]", "capacity"),
        ] {
            let err = TideConfig::from_spec(&PolicySpec::parse(spec).unwrap()).unwrap_err();
            assert!(
                err.to_string().contains(&format!("`{key}`")),
                "{spec}: {err}"
            );
        }
        let ok = TideConfig::from_spec(&PolicySpec::parse("tide").unwrap()).unwrap();
        assert_eq!(ok, TideConfig::defaults().unwrap());
        let set = TideConfig::from_spec(
            &PolicySpec::parse("tide[conflict_z=3,abstract_window=20]").unwrap(),
        )
        .unwrap();
        // The generator's take-up probabilities belong to the world (the
        // generation arena's settings), not to the method.
        let row = crate::registry::family("tide").unwrap();
        for key in ["adhere_hedged", "adhere_firm"] {
            let spec = PolicySpec::parse(&format!("tide[{key}=0.5]")).unwrap();
            assert!(row.check(&spec).is_err(), "{key} is still a TIDE key");
        }
        assert_eq!((set.conflict_z, set.abstract_window), (3.0, 20));
    }
}
