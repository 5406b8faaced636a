//! TIDE's memory unit, the *guideline*, as a [`MemoryRecord`] of kind
//! [`RecordKind::Guideline`]: a content decision together with its
//! applicability conditions, its accumulated fitness evidence per objective,
//! its provenance and its version (`tide-recommendation-feedback-evolves-memory`,
//! §3: "memories are guidelines").
//!
//! Everything TIDE knows about a guideline lives in the record's `fields`
//! (so the op log alone rebuilds it); this module is the one place that
//! reads and writes those fields. Evidence is kept as running statistics
//! ([`Stats`]: count, mean, sum of squared deviations) per objective and per
//! context attribute, never as one scalar, and as the most recent evidence
//! items themselves ([`EvidenceRecord`], e_i = (d, c, s): the decision, its
//! context, the supporting or counter evidence), at most `evidence_keep`.
//!
//! **Two decision spaces.** A [`Mode::Generate`] guideline decides content
//! dimensions ([`DIMENSIONS`], values from [`options`]) under request
//! conditions ([`CONTEXT_ATTRIBUTES`]). A [`Mode::Predict`] guideline decides
//! rating offsets: dimension = a genre, value = the offset in stars as a
//! signed decimal (`{"Drama": "+0.800"}`), under item conditions
//! ([`PREDICT_CONTEXT`]). [`Mode::same`] says when two values of one
//! dimension prescribe the same thing (generation: equal; prediction: within
//! `revise_gap` stars); everything else that compares decisions (duplicates,
//! conflicts, abstraction) goes through it, so the candidate operations and
//! GovernAndSelect_B ([`super::evolve`]) are one code for both spaces.

use super::roles::Direction;
use evomem_core::{LogicalTime, MemoryId, MemoryRecord, Namespace, RecordKind, RecordStatus};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The editable content decisions of a generated material (the rubric's
/// dimensions), in a fixed order.
pub const DIMENSIONS: [&str; 4] = ["selling_point", "density", "style", "cta"];

/// The values a dimension may take; the first is the generator's prior (what
/// it writes when no guideline applies).
pub fn options(dim: &str) -> &'static [&'static str] {
    match dim {
        "selling_point" => &["quality", "price", "usability", "novelty"],
        "density" => &["low", "high"],
        "style" => &["plain", "vivid"],
        "cta" => &["soft", "urgent"],
        _ => &[],
    }
}

/// The generator's prior value of `dim` (the first option).
pub fn prior(dim: &str) -> &'static str {
    options(dim).first().copied().unwrap_or("")
}

/// The request attributes a guideline's conditions may name (the matched
/// context of semantic credit).
pub const CONTEXT_ATTRIBUTES: [&str; 5] = [
    "product",
    "audience",
    "channel",
    "placement",
    "campaign_stage",
];

/// The item attributes a prediction guideline's conditions may name (the
/// context c of a rating decision): `era`, the release decade of the item
/// (`1990s`), and `item_bias`, whether the item's matured ratings sit above
/// or below the global mean at decision time (`above`, `below`, `none`).
pub const PREDICT_CONTEXT: [&str; 2] = ["era", "item_bias"];

/// A prediction decision value: the offset written as a signed decimal.
pub fn offset_value(x: f64) -> String {
    format!("{x:+.3}")
}

/// The offset a prediction decision value prescribes (`None`: not a number).
pub fn parse_offset(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// Running statistics of one evidence stream (Welford): count, mean and the
/// sum of squared deviations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Observations.
    pub n: u64,
    /// Mean.
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    pub m2: f64,
}

impl Stats {
    /// Add one observation.
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    /// Sample variance (0 below two observations).
    pub fn var(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }

    /// Standard error of the mean; `prior_sd / sqrt(n)` floors it so that a
    /// few identical observations do not look certain.
    pub fn se(&self, prior_sd: f64) -> f64 {
        if self.n == 0 {
            return f64::INFINITY;
        }
        let sd = self.var().sqrt().max(prior_sd);
        sd / (self.n as f64).sqrt()
    }

    /// Pool two streams (Chan et al.'s parallel update).
    pub fn merge(&mut self, o: &Stats) {
        if o.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *o;
            return;
        }
        let n = self.n + o.n;
        let d = o.mean - self.mean;
        self.mean += d * o.n as f64 / n as f64;
        self.m2 += o.m2 + d * d * (self.n as f64) * (o.n as f64) / n as f64;
        self.n = n;
    }
}

/// Which decision kind a guideline serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Content decisions for the generation arena.
    Generate,
    /// A rating offset for the delayed rating stream.
    Predict,
}

impl Mode {
    /// The primary objective of its fitness evidence.
    pub fn primary_key(self) -> &'static str {
        match self {
            Mode::Generate => "ctr",
            Mode::Predict => "error",
        }
    }

    /// The attributes its conditions may name.
    pub fn attributes(self) -> &'static [&'static str] {
        match self {
            Mode::Generate => &CONTEXT_ATTRIBUTES,
            Mode::Predict => &PREDICT_CONTEXT,
        }
    }

    /// A valid decision set and conditions (GovernAndSelect's validity
    /// filter): known dimensions and values, known attributes.
    pub fn valid(
        self,
        decisions: &BTreeMap<String, String>,
        conditions: &BTreeMap<String, String>,
    ) -> bool {
        let known = match self {
            Mode::Generate => decisions
                .iter()
                .all(|(d, v)| options(d).contains(&v.as_str())),
            Mode::Predict => decisions
                .values()
                .all(|v| parse_offset(v).is_some_and(|x| x.abs() <= 4.0)),
        };
        !decisions.is_empty()
            && known
            && conditions
                .keys()
                .all(|k| self.attributes().contains(&k.as_str()))
    }

    /// True when values `a` and `b` of one dimension prescribe the same
    /// decision: equal (generation), or offsets at most `gap` apart
    /// (prediction; `gap` is the `revise_gap` key).
    pub fn same(self, a: &str, b: &str, gap: f64) -> bool {
        match self {
            Mode::Generate => a == b,
            Mode::Predict => match (parse_offset(a), parse_offset(b)) {
                (Some(x), Some(y)) => (x - y).abs() <= gap,
                _ => a == b,
            },
        }
    }

    /// True when two decision sets prescribe the same on the same dimensions.
    pub fn same_decisions(
        self,
        a: &BTreeMap<String, String>,
        b: &BTreeMap<String, String>,
        gap: f64,
    ) -> bool {
        a.len() == b.len()
            && a.iter()
                .all(|(d, v)| b.get(d).is_some_and(|w| self.same(v, w, gap)))
    }

    /// True when the two prescribe different things on a shared dimension.
    pub fn contradicts(
        self,
        a: &BTreeMap<String, String>,
        b: &BTreeMap<String, String>,
        gap: f64,
    ) -> bool {
        a.iter()
            .any(|(d, v)| b.get(d).is_some_and(|w| !self.same(v, w, gap)))
    }
}

/// One evidence item e = (d, c, s) as a guideline keeps it: the decision it
/// is about, the context it was observed in, and the supporting or counter
/// evidence (direction, numeric contrast per objective, how many matched
/// controls, which decision it came from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecord {
    /// d: dimension → value of the decision.
    pub decision: BTreeMap<String, String>,
    /// c: the delivery context (attribute → value) it held in.
    pub context: BTreeMap<String, String>,
    /// s: support or counter.
    pub direction: Direction,
    /// s: contrast per objective, (estimate, standard error).
    pub objectives: BTreeMap<String, (f64, f64)>,
    /// s: matched controls behind it.
    pub controls: usize,
    /// s: the decision (record) it came from.
    pub source: u64,
}

/// Field names of a guideline record.
pub mod fields {
    /// `generate` or `predict`.
    pub const MODE: &str = "tide_mode";
    /// Decisions: object dimension → value (predict: genre → offset).
    pub const DECISIONS: &str = "decisions";
    /// Applicability conditions: object attribute → value.
    pub const CONDITIONS: &str = "conditions";
    /// Version, bumped by every revision.
    pub const VERSION: &str = "version";
    /// Fitness evidence per objective (object objective → [`super::Stats`]).
    pub const FITNESS: &str = "fitness";
    /// Primary-objective fitness per context value (`audience=family` → stats).
    pub const BY_CONTEXT: &str = "by_context";
    /// Predict: drift evidence, rating minus the estimate it made (how far
    /// its offset is off).
    pub const RESIDUAL: &str = "residual";
    /// Predict: drift evidence per context value.
    pub const RESIDUAL_BY_CONTEXT: &str = "residual_by_context";
    /// The most recent evidence items e = (d, c, s) (bounded).
    pub const EVIDENCE: &str = "evidence";
    /// Decision counter at the last use recorded in a usage trace.
    pub const LAST_USED: &str = "last_used";
    /// Provenance: parent guideline ids.
    pub const PARENTS: &str = "parents";
    /// The recommender version its fitness evidence was gathered under.
    pub const REC_VERSION: &str = "rec_version";
    /// Evidence from earlier recommender versions (kept, no longer used).
    pub const ARCHIVE: &str = "fitness_archive";
    /// Provenance: how it was made (`seed`, `narrow`, `revise`, `split`,
    /// `crossover`, `novel`, `abstract`, `append`).
    pub const ORIGIN: &str = "origin";
}

/// Predict: the mean offset `decisions` prescribe for an item of `genres`.
pub fn offset_for(decisions: &BTreeMap<String, String>, genres: &[String]) -> Option<f64> {
    let xs: Vec<f64> = decisions
        .iter()
        .filter(|(g, _)| genres.contains(g))
        .filter_map(|(_, v)| parse_offset(v))
        .collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// A guideline as TIDE reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Guideline {
    /// Record id.
    pub id: MemoryId,
    /// Decision kind served.
    pub mode: Mode,
    /// The content decision(s): dimension → value.
    pub decisions: BTreeMap<String, String>,
    /// Applicability conditions: attribute → value.
    pub conditions: BTreeMap<String, String>,
    /// Version.
    pub version: u64,
    /// Governance status (provisional candidates, promoted incumbents).
    pub status: RecordStatus,
    /// Fitness evidence per objective.
    pub fitness: BTreeMap<String, Stats>,
    /// Primary-objective fitness per context value.
    pub by_context: BTreeMap<String, Stats>,
    /// Predict: drift evidence.
    pub residual: Stats,
    /// Predict: drift evidence per context value.
    pub residual_by_context: BTreeMap<String, Stats>,
    /// The most recent evidence items, oldest first.
    pub evidence: Vec<EvidenceRecord>,
    /// Decision counter at last recorded use.
    pub last_used: u64,
    /// Recommender version of the fitness evidence (0: none yet).
    pub rec_version: i64,
    /// Fitness evidence of earlier recommender versions.
    pub archive: BTreeMap<String, Stats>,
    /// Parents.
    pub parents: Vec<String>,
    /// Origin.
    pub origin: String,
    /// Text (what an LLM generator reads).
    pub text: String,
    /// Creation time.
    pub created_at: LogicalTime,
}

pub(super) fn str_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn stats_map(v: Option<&Value>) -> BTreeMap<String, Stats> {
    v.and_then(|v| BTreeMap::<String, Stats>::deserialize(v).ok())
        .unwrap_or_default()
}

impl Guideline {
    /// A fresh guideline (version 1, no evidence).
    pub fn new(
        id: MemoryId,
        mode: Mode,
        decisions: BTreeMap<String, String>,
        conditions: BTreeMap<String, String>,
        text: String,
        origin: &str,
        at: LogicalTime,
    ) -> Self {
        Self {
            id,
            mode,
            decisions,
            conditions,
            version: 1,
            status: RecordStatus::Provisional,
            fitness: BTreeMap::new(),
            by_context: BTreeMap::new(),
            residual: Stats::default(),
            residual_by_context: BTreeMap::new(),
            evidence: Vec::new(),
            last_used: 0,
            rec_version: 0,
            archive: BTreeMap::new(),
            parents: Vec::new(),
            origin: origin.to_string(),
            text,
            created_at: at,
        }
    }

    /// Read a record; `None` when it is not a TIDE guideline.
    pub fn read(r: &MemoryRecord) -> Option<Self> {
        if r.kind != RecordKind::Guideline {
            return None;
        }
        // Fields deserialise from the borrowed JSON (`&Value` is a
        // deserializer): cloning each value first doubled the allocations of
        // the read that TIDE's feedback makes for every guideline it sees
        // (issue 16's profiles).
        let mode = Mode::deserialize(r.fields.get(fields::MODE)?).ok()?;
        Some(Self {
            id: r.id.clone(),
            mode,
            decisions: str_map(r.fields.get(fields::DECISIONS)),
            conditions: str_map(r.fields.get(fields::CONDITIONS)),
            version: r
                .fields
                .get(fields::VERSION)
                .and_then(Value::as_u64)
                .unwrap_or(1),
            status: r.status,
            fitness: stats_map(r.fields.get(fields::FITNESS)),
            by_context: stats_map(r.fields.get(fields::BY_CONTEXT)),
            residual: r
                .fields
                .get(fields::RESIDUAL)
                .and_then(|v| Deserialize::deserialize(v).ok())
                .unwrap_or_default(),
            residual_by_context: stats_map(r.fields.get(fields::RESIDUAL_BY_CONTEXT)),
            evidence: r
                .fields
                .get(fields::EVIDENCE)
                .and_then(|v| Deserialize::deserialize(v).ok())
                .unwrap_or_default(),
            last_used: r
                .fields
                .get(fields::LAST_USED)
                .and_then(Value::as_u64)
                .unwrap_or(0),
            rec_version: r
                .fields
                .get(fields::REC_VERSION)
                .and_then(Value::as_i64)
                .unwrap_or(0),
            archive: stats_map(r.fields.get(fields::ARCHIVE)),
            parents: r
                .fields
                .get(fields::PARENTS)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            origin: r.field_str(fields::ORIGIN).unwrap_or("seed").to_string(),
            text: r.text.clone(),
            created_at: r.created_at,
        })
    }

    /// The evidence fields (what a credit update rewrites).
    pub fn evidence_fields(&self) -> BTreeMap<String, Value> {
        BTreeMap::from([
            (fields::FITNESS.to_string(), json!(self.fitness)),
            (fields::BY_CONTEXT.to_string(), json!(self.by_context)),
            (fields::RESIDUAL.to_string(), json!(self.residual)),
            (
                fields::RESIDUAL_BY_CONTEXT.to_string(),
                json!(self.residual_by_context),
            ),
            (fields::EVIDENCE.to_string(), json!(self.evidence)),
            (fields::LAST_USED.to_string(), json!(self.last_used)),
            (fields::VERSION.to_string(), json!(self.version)),
            (fields::REC_VERSION.to_string(), json!(self.rec_version)),
            (fields::ARCHIVE.to_string(), json!(self.archive)),
        ])
    }

    /// Every field.
    pub fn fields(&self) -> BTreeMap<String, Value> {
        let mut f = self.evidence_fields();
        f.insert(fields::MODE.into(), json!(self.mode));
        f.insert(fields::DECISIONS.into(), json!(self.decisions));
        f.insert(fields::CONDITIONS.into(), json!(self.conditions));
        f.insert(fields::PARENTS.into(), json!(self.parents));
        f.insert(fields::ORIGIN.into(), json!(self.origin));
        f
    }

    /// The record to create in `ns`.
    pub fn record(&self, ns: Namespace) -> MemoryRecord {
        let mut r = MemoryRecord::new(
            self.id.clone(),
            ns,
            RecordKind::Guideline,
            self.text.clone(),
            self.created_at,
        );
        r.fields = self.fields();
        r.status = self.status;
        r
    }

    /// True when every condition holds in `attrs`.
    pub fn applies(&self, attrs: &BTreeMap<String, String>) -> bool {
        self.conditions
            .iter()
            .all(|(k, v)| attrs.get(k).is_some_and(|a| a == v))
    }

    /// Number of conditions (more is more specific).
    pub fn specificity(&self) -> usize {
        self.conditions.len()
    }

    /// Primary-objective fitness evidence (`ctr` for generation, `error`
    /// reduction for prediction).
    pub fn primary(&self) -> Stats {
        self.fitness
            .get(self.mode.primary_key())
            .copied()
            .unwrap_or_default()
    }

    /// Keep evidence item `e`, dropping the oldest beyond `keep`.
    pub fn keep_evidence(&mut self, e: EvidenceRecord, keep: usize) {
        self.evidence.push(e);
        let excess = self.evidence.len().saturating_sub(keep);
        self.evidence.drain(..excess);
    }

    /// Predict: the offset it adds for an item of `genres` (the mean of its
    /// decisions on those genres; `None` when it decides none of them).
    pub fn offset_for(&self, genres: &[String]) -> Option<f64> {
        offset_for(&self.decisions, genres)
    }

    /// A short line for prompts and reports.
    pub fn line(&self) -> String {
        let d: Vec<String> = self
            .decisions
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let c: Vec<String> = self
            .conditions
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let p = self.primary();
        format!(
            "- {} v{} [{}] decide {} when {} (evidence n={}, mean={:+.3}): \"{}\"",
            self.id,
            self.version,
            match self.status {
                RecordStatus::Provisional => "provisional",
                RecordStatus::Promoted => "incumbent",
                RecordStatus::Active => "active",
            },
            d.join(", "),
            if c.is_empty() {
                "always".to_string()
            } else {
                c.join(", ")
            },
            p.n,
            p.mean,
            self.text
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stats_match_the_two_pass_formulas_and_merge() {
        let xs = [1.0, 2.0, 4.0, 7.0];
        let mut s = Stats::default();
        xs.iter().for_each(|x| s.push(*x));
        assert!((s.mean - 3.5).abs() < 1e-12);
        assert!((s.var() - 7.0).abs() < 1e-12);
        let (mut a, mut b) = (Stats::default(), Stats::default());
        a.push(1.0);
        a.push(2.0);
        b.push(4.0);
        b.push(7.0);
        a.merge(&b);
        assert!((a.mean - s.mean).abs() < 1e-12 && (a.m2 - s.m2).abs() < 1e-9);
    }

    #[test]
    fn a_guideline_round_trips_through_its_record() {
        let mut g = Guideline::new(
            MemoryId::new("g1"),
            Mode::Generate,
            BTreeMap::from([("cta".into(), "urgent".into())]),
            BTreeMap::from([("audience".into(), "family".into())]),
            "Use an urgent call to action for families.".into(),
            "seed",
            LogicalTime(3),
        );
        g.fitness.entry("ctr".into()).or_default().push(0.2);
        let r = g.record(Namespace::shared());
        assert_eq!(Guideline::read(&r).unwrap(), g);
    }
}
