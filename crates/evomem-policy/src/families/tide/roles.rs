//! TIDE's LLM roles, each with a prompt file (`prompts/tide_*.md`), a JSON
//! schema, a validating parser and a documented, deterministic offline
//! algorithm. Every call goes through [`evomem_kit::RoleCaller`].
//!
//! | role | prompt | offline algorithm |
//! |---|---|---|
//! | `tide_generate` (the frozen generator) | `prompts/tide_generate.md` | [`super::generator::compose`]: per dimension, the applicable guideline with the most conditions (then incumbents first, then more evidence, then id) among those taken up decides; at temperature 0 every applicable guideline is taken up, a sampled (live) call takes up each with a probability set by its wording; the trace names every guideline taken up, decisive one first |
//! | `tide_rubric` (decision rubric) | `prompts/tide_rubric.md` | looks the generator's fixed phrases up in the material ([`super::generator::phrase`]) |
//! | `tide_evidence` (evidence chain) | `prompts/tide_evidence.md` | [`offline_evidence`]: z_sem = 0 for too few controls, unexplained objective conflict, no stable decision contrast, or unresolved counterexamples; else each item is support / counter / none by the sign and size of its contrast |
//! | `tide_align` (alignment) | `prompts/tide_align.md` | the guideline decides the evidence item's dimension (any value: the paper's Align is a semantic link to the decision; whether the guideline *changed* it is CF's test) and its conditions hold in the item's context |
//! | `tide_write` (candidate writing) | `prompts/tide_write.md` | [`offline_text`]: an imperative sentence naming the decision and the conditions |

use super::generator::{self, GenerateInput, GenerateOutput};
use super::guideline::{options, CONTEXT_ATTRIBUTES, DIMENSIONS};
use evomem_core::{LlmError, Role};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

fn kv(m: &BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "(none)".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn from_answer<T: DeserializeOwned>(answer: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(answer).map_err(|e| e.to_string())
}

fn check_decisions(d: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in d {
        if !options(k).contains(&v.as_str()) {
            return Err(format!("`{k}={v}` is not a known decision"));
        }
    }
    Ok(())
}

/// The frozen generator: composes a material from the retrieved guidelines
/// and reports which guidelines it took up for which dimension, the
/// decisive one first (its usage trace).
#[derive(Debug, Clone, Copy, Default)]
pub struct GenerateRole;

impl Role for GenerateRole {
    type Input = GenerateInput;
    type Output = GenerateOutput;
    fn name(&self) -> &'static str {
        "tide_generate"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../prompts/tide_generate.md")
    }
    fn variables(&self, input: &GenerateInput) -> BTreeMap<String, String> {
        let dims: Vec<String> = DIMENSIONS
            .iter()
            .map(|d| format!("- {d}: one of {}", options(d).join(", ")))
            .collect();
        let gl: Vec<String> = input
            .guidelines
            .iter()
            .map(|g| {
                format!(
                    "- {} (decide {}; when {}): \"{}\"",
                    g.id,
                    kv(&g.decisions),
                    kv(&g.conditions),
                    g.text
                )
            })
            .collect();
        BTreeMap::from([
            ("request".into(), input.request_text.clone()),
            ("attributes".into(), kv(&input.attributes)),
            ("dimensions".into(), dims.join("\n")),
            (
                "guidelines".into(),
                if gl.is_empty() {
                    "(none)".into()
                } else {
                    gl.join("\n")
                },
            ),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["material", "decisions", "used"],
               "properties": {"material": {"type": "string"},
                              "decisions": {"type": "object"},
                              "used": {"type": "array", "items": {"type": "object",
                                  "required": ["id", "dimension"],
                                  "properties": {"id": {"type": "string"}, "dimension": {"type": "string"}}}}}})
    }
    fn parse(
        &self,
        input: &GenerateInput,
        answer: serde_json::Value,
    ) -> Result<GenerateOutput, String> {
        let out: GenerateOutput = from_answer(answer)?;
        check_decisions(&out.decisions)?;
        for u in &out.used {
            if !input.guidelines.iter().any(|g| g.id == u.id) {
                return Err(format!("used guideline `{}` was not retrieved", u.id));
            }
        }
        Ok(out)
    }
    fn offline(&self, input: &GenerateInput) -> Result<GenerateOutput, LlmError> {
        Ok(generator::compose(input))
    }
}

/// Input of `tide_rubric`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RubricInput {
    /// The material's text.
    pub material: String,
}

/// Output of `tide_rubric`: the editable content decisions found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RubricOutput {
    /// Dimension → value.
    pub decisions: BTreeMap<String, String>,
}

/// The decision rubric: locates the editable content decisions in a material.
#[derive(Debug, Clone, Copy, Default)]
pub struct RubricRole;

impl Role for RubricRole {
    type Input = RubricInput;
    type Output = RubricOutput;
    fn name(&self) -> &'static str {
        "tide_rubric"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../prompts/tide_rubric.md")
    }
    fn variables(&self, input: &RubricInput) -> BTreeMap<String, String> {
        let dims: Vec<String> = DIMENSIONS
            .iter()
            .map(|d| format!("- {d}: one of {}", options(d).join(", ")))
            .collect();
        BTreeMap::from([
            ("material".into(), input.material.clone()),
            ("dimensions".into(), dims.join("\n")),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["decisions"],
               "properties": {"decisions": {"type": "object"}}})
    }
    fn parse(&self, _: &RubricInput, answer: serde_json::Value) -> Result<RubricOutput, String> {
        let out: RubricOutput = from_answer(answer)?;
        check_decisions(&out.decisions)?;
        Ok(out)
    }
    fn offline(&self, input: &RubricInput) -> Result<RubricOutput, LlmError> {
        Ok(RubricOutput {
            decisions: generator::read_decisions(&input.material),
        })
    }
}

/// One decision contrast shown to the evidence chain: the target's value on
/// a dimension against the matched controls', per objective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContrastIn {
    /// Dimension.
    pub dimension: String,
    /// The target's value.
    pub value: String,
    /// Contrast per objective: (estimate, standard error).
    pub objectives: BTreeMap<String, (f64, f64)>,
}

/// Input of `tide_evidence`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceInput {
    /// The material's decisions.
    pub decisions: BTreeMap<String, String>,
    /// The delivery context (request attributes).
    pub context: BTreeMap<String, String>,
    /// The environment record E_i.
    pub environment: BTreeMap<String, String>,
    /// Matched controls N_i found.
    pub controls: usize,
    /// Fewest controls that support a conclusion.
    pub min_controls: usize,
    /// Material-level fitness per objective relative to the controls.
    pub fitness: BTreeMap<String, (f64, f64)>,
    /// Decision contrasts.
    pub contrasts: Vec<ContrastIn>,
    /// Earlier matched records of the same material whose fitness has the
    /// opposite sign (unresolved counterexamples), and those that agree.
    pub counterexamples: usize,
    /// See `counterexamples`.
    pub agreeing: usize,
    /// |estimate / se| a contrast needs to count.
    pub z_min: f64,
    /// |estimate / se| beyond which two material fitnesses of opposite sign
    /// are an objective conflict (key `conflict_z`).
    pub conflict_z: f64,
}

/// Direction of one evidence item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The decision did better than the controls' value.
    Support,
    /// It did worse.
    Counter,
    /// No stable difference.
    None,
}

/// One evidence item e = (d, c, s) about one decision: d is the dimension
/// and value, c the delivery context the decision was observed in (its
/// applicability conditions), s the direction of the evidence (the numbers
/// behind it are the contrast of the same dimension).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceItem {
    /// Dimension.
    pub dimension: String,
    /// Value.
    pub value: String,
    /// Direction.
    pub direction: Direction,
    /// c: attribute → value. An answer without it gets the record's
    /// context ([`item_context`]).
    #[serde(default)]
    pub context: BTreeMap<String, String>,
}

/// The context c of an evidence item observed under delivery context
/// `context`: the attributes a guideline's conditions may name.
pub fn item_context(context: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    context
        .iter()
        .filter(|(k, _)| CONTEXT_ATTRIBUTES.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Output of `tide_evidence`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceOutput {
    /// z_sem.
    pub valid: bool,
    /// Why, in words (the evidence chain).
    pub reason: String,
    /// Items.
    pub items: Vec<EvidenceItem>,
}

/// The evidence chain: from content difference through environment to
/// outcome, and whether the semantic evidence is sufficient (z_sem).
#[derive(Debug, Clone, Copy, Default)]
pub struct EvidenceRole;

fn pair_lines(m: &BTreeMap<String, (f64, f64)>) -> String {
    m.iter()
        .map(|(k, (e, s))| format!("{k} {e:+.3} (se {s:.3})"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Role for EvidenceRole {
    type Input = EvidenceInput;
    type Output = EvidenceOutput;
    fn name(&self) -> &'static str {
        "tide_evidence"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../prompts/tide_evidence.md")
    }
    fn variables(&self, i: &EvidenceInput) -> BTreeMap<String, String> {
        let contrasts: Vec<String> = i
            .contrasts
            .iter()
            .map(|c| {
                format!(
                    "- {}={}: {}",
                    c.dimension,
                    c.value,
                    pair_lines(&c.objectives)
                )
            })
            .collect();
        BTreeMap::from([
            ("decisions".into(), kv(&i.decisions)),
            ("context".into(), kv(&i.context)),
            ("environment".into(), kv(&i.environment)),
            (
                "controls".into(),
                format!("{} (at least {} needed)", i.controls, i.min_controls),
            ),
            ("fitness".into(), pair_lines(&i.fitness)),
            (
                "contrasts".into(),
                if contrasts.is_empty() {
                    "(none)".into()
                } else {
                    contrasts.join("\n")
                },
            ),
            (
                "counterexamples".into(),
                format!("{} opposite, {} agreeing", i.counterexamples, i.agreeing),
            ),
            ("z_min".into(), format!("{:.2}", i.z_min)),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["valid", "reason", "items"],
               "properties": {"valid": {"type": "boolean"}, "reason": {"type": "string"},
                              "items": {"type": "array", "items": {"type": "object",
                                  "required": ["dimension", "value", "direction"],
                                  "properties": {"dimension": {"type": "string"}, "value": {"type": "string"},
                                                 "direction": {"enum": ["support", "counter", "none"]},
                                                 "context": {"type": "object"}}}}}})
    }
    fn parse(
        &self,
        input: &EvidenceInput,
        answer: serde_json::Value,
    ) -> Result<EvidenceOutput, String> {
        let mut out: EvidenceOutput = from_answer(answer)?;
        let own = item_context(&input.context);
        for it in &mut out.items {
            if input.decisions.get(&it.dimension) != Some(&it.value) {
                return Err(format!(
                    "item `{}={}` is not a decision of the material",
                    it.dimension, it.value
                ));
            }
            // c must be the record's context or a part of it.
            if it.context.iter().any(|(k, v)| own.get(k) != Some(v)) {
                return Err(format!(
                    "item `{}={}` names a context the record was not delivered in",
                    it.dimension, it.value
                ));
            }
            if it.context.is_empty() {
                it.context = own.clone();
            }
        }
        Ok(out)
    }
    fn offline(&self, input: &EvidenceInput) -> Result<EvidenceOutput, LlmError> {
        Ok(offline_evidence(input))
    }
}

/// The offline evidence chain (see the module table). Objectives: the first
/// listed (`ctr`) is primary; a conflict is two objectives whose material
/// fitness are both beyond `conflict_z` standard errors with opposite signs.
/// Every item's context c is the record's delivery context.
pub fn offline_evidence(i: &EvidenceInput) -> EvidenceOutput {
    let invalid = |reason: String| EvidenceOutput {
        valid: false,
        reason,
        items: Vec::new(),
    };
    if i.controls < i.min_controls {
        return invalid(format!(
            "only {} matched control(s), {} needed",
            i.controls, i.min_controls
        ));
    }
    let strong: Vec<f64> = i
        .fitness
        .values()
        .filter(|(e, s)| *s > 0.0 && (e / s).abs() >= i.conflict_z)
        .map(|(e, _)| e.signum())
        .collect();
    if strong.iter().any(|s| *s > 0.0) && strong.iter().any(|s| *s < 0.0) {
        return invalid(
            "objectives conflict and the environment record does not explain it".into(),
        );
    }
    if i.counterexamples > i.agreeing {
        return invalid(format!(
            "{} earlier matched record(s) of the same material point the other way, {} agree",
            i.counterexamples, i.agreeing
        ));
    }
    let items: Vec<EvidenceItem> = i
        .contrasts
        .iter()
        .map(|c| {
            let (e, s) = c
                .objectives
                .get("ctr")
                .copied()
                .unwrap_or((0.0, f64::INFINITY));
            let direction = if s.is_finite() && s > 0.0 && (e / s).abs() >= i.z_min {
                if e > 0.0 {
                    Direction::Support
                } else {
                    Direction::Counter
                }
            } else {
                Direction::None
            };
            EvidenceItem {
                dimension: c.dimension.clone(),
                value: c.value.clone(),
                direction,
                context: item_context(&i.context),
            }
        })
        .collect();
    if items.iter().all(|it| it.direction == Direction::None) {
        return invalid(
            "no decision keeps a stable advantage or disadvantage over the controls".into(),
        );
    }
    let named: Vec<String> = items
        .iter()
        .filter(|it| it.direction != Direction::None)
        .map(|it| format!("{}={} ({:?})", it.dimension, it.value, it.direction))
        .collect();
    EvidenceOutput {
        valid: true,
        reason: format!(
            "against {} matched controls in the same environment, {}",
            i.controls,
            named.join(", ")
        ),
        items,
    }
}

/// A guideline as the alignment and writing roles see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuidelineView {
    /// Id.
    pub id: String,
    /// Decisions.
    pub decisions: BTreeMap<String, String>,
    /// Conditions.
    pub conditions: BTreeMap<String, String>,
    /// Text.
    pub text: String,
}

/// Input of `tide_align`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignInput {
    /// The memory.
    pub guideline: GuidelineView,
    /// The evidence item's dimension.
    pub dimension: String,
    /// The evidence item's value.
    pub value: String,
    /// The delivery context.
    pub context: BTreeMap<String, String>,
}

/// Output of `tide_align`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignOutput {
    /// Align(m, e_i).
    pub aligned: bool,
}

/// Alignment: is a memory semantically linked to an evidence item's decision?
#[derive(Debug, Clone, Copy, Default)]
pub struct AlignRole;

impl Role for AlignRole {
    type Input = AlignInput;
    type Output = AlignOutput;
    fn name(&self) -> &'static str {
        "tide_align"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../prompts/tide_align.md")
    }
    fn variables(&self, i: &AlignInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("guideline".into(), i.guideline.text.clone()),
            ("guideline_decisions".into(), kv(&i.guideline.decisions)),
            ("guideline_conditions".into(), kv(&i.guideline.conditions)),
            ("decision".into(), format!("{}={}", i.dimension, i.value)),
            ("context".into(), kv(&i.context)),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["aligned"],
               "properties": {"aligned": {"type": "boolean"}}})
    }
    fn parse(&self, _: &AlignInput, answer: serde_json::Value) -> Result<AlignOutput, String> {
        from_answer(answer)
    }
    fn offline(&self, i: &AlignInput) -> Result<AlignOutput, LlmError> {
        // Linked to the decision = speaks to its dimension where it applies;
        // the value is not compared (whether the guideline changed the
        // decision is CF's question, not Align's).
        let g = &i.guideline;
        let decides = g.decisions.contains_key(&i.dimension);
        let applies = g
            .conditions
            .iter()
            .all(|(k, v)| i.context.get(k).is_some_and(|c| c == v));
        Ok(AlignOutput {
            aligned: decides && applies,
        })
    }
}

/// Input of `tide_write`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteInput {
    /// `narrow`, `revise`, `split`, `crossover`, `novel`, `abstract`,
    /// `append` (generation) or `offset` (prediction: a new genre guideline).
    pub operation: String,
    /// The candidate's decisions.
    pub decisions: BTreeMap<String, String>,
    /// The candidate's conditions.
    pub conditions: BTreeMap<String, String>,
    /// Prediction: the rating offset.
    pub offset: Option<f64>,
    /// Parent lines (empty for a parentless candidate).
    pub parents: Vec<String>,
    /// The evidence behind it, in words.
    pub evidence: String,
}

/// Output of `tide_write`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteOutput {
    /// The guideline's text.
    pub text: String,
}

/// Candidate writing: the text of a new or edited guideline.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteRole;

impl Role for WriteRole {
    type Input = WriteInput;
    type Output = WriteOutput;
    fn name(&self) -> &'static str {
        "tide_write"
    }
    fn template(&self) -> &'static str {
        include_str!("../../../prompts/tide_write.md")
    }
    fn variables(&self, i: &WriteInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("operation".into(), i.operation.clone()),
            ("decisions".into(), kv(&i.decisions)),
            ("conditions".into(), kv(&i.conditions)),
            (
                "offset".into(),
                i.offset
                    .map(|o| format!("{o:+.2}"))
                    .unwrap_or_else(|| "(none)".into()),
            ),
            (
                "parents".into(),
                if i.parents.is_empty() {
                    "(none: a parentless candidate)".into()
                } else {
                    i.parents.join("\n")
                },
            ),
            ("evidence".into(), i.evidence.clone()),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["text"],
               "properties": {"text": {"type": "string"}}})
    }
    fn parse(&self, _: &WriteInput, answer: serde_json::Value) -> Result<WriteOutput, String> {
        let out: WriteOutput = from_answer(answer)?;
        if out.text.trim().is_empty() {
            return Err("empty `text`".into());
        }
        Ok(out)
    }
    fn offline(&self, i: &WriteInput) -> Result<WriteOutput, LlmError> {
        Ok(WriteOutput {
            text: offline_text(i),
        })
    }
}

/// The offline candidate text: one imperative sentence per decision, then
/// the conditions; for prediction the offset sentence.
pub fn offline_text(i: &WriteInput) -> String {
    let when = if i.conditions.is_empty() {
        String::new()
    } else {
        format!(" when {}", kv(&i.conditions))
    };
    if let Some(o) = i.offset {
        // Prediction decisions are genre → offset: name the genres.
        let what = if i.decisions.is_empty() {
            "these".to_string()
        } else {
            i.decisions
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(" and ")
        };
        return format!("This user rates {what} items about {o:+.2} stars away from their usual rating (user mean plus item bias).");
    }
    let parts: Vec<String> = i
        .decisions
        .iter()
        .map(|(d, v)| format!("use {} {}", d.replace('_', " "), v))
        .collect();
    let mut s = parts.join(" and ");
    if let Some(c) = s.get(0..1) {
        s = c.to_uppercase() + &s[1..];
    }
    format!("{s}{when}.")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::generator::GuidelineIn;
    use super::*;

    fn render<R: Role>(role: &R, input: &R::Input) -> String {
        let msgs =
            evomem_llm::template::render(role.name(), role.template(), &role.variables(input))
                .unwrap();
        msgs.iter()
            .map(|m| format!("### {:?}\n{}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    fn attrs() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("product".into(), "blender".into()),
            ("audience".into(), "family".into()),
            ("channel".into(), "feed".into()),
            ("placement".into(), "top".into()),
            ("campaign_stage".into(), "regular".into()),
        ])
    }

    fn gen_input() -> GenerateInput {
        GenerateInput {
            request_id: "r1".into(),
            request_text: "Write a feed card for a blender, for families.".into(),
            attributes: attrs(),
            guidelines: vec![
                GuidelineIn {
                    id: "g:price".into(),
                    text: "Lead with price for families.".into(),
                    decisions: BTreeMap::from([("selling_point".into(), "price".into())]),
                    conditions: BTreeMap::from([("audience".into(), "family".into())]),
                    evidence: 0.1,
                    incumbent: true,
                },
                GuidelineIn {
                    id: "g:novelty".into(),
                    text: "Maybe consider novelty.".into(),
                    decisions: BTreeMap::from([("selling_point".into(), "novelty".into())]),
                    conditions: BTreeMap::new(),
                    evidence: 0.0,
                    incumbent: false,
                },
            ],
            sample: None,
            adherence: super::super::generator::Adherence::default(),
        }
    }

    #[test]
    fn prompt_snapshots() {
        let g = gen_input();
        insta::assert_snapshot!("tide_generate", render(&GenerateRole, &g));
        let out = GenerateRole.offline(&g).unwrap();
        insta::assert_snapshot!(
            "tide_generate_offline",
            serde_json::to_string_pretty(&out).unwrap()
        );
        insta::assert_snapshot!(
            "tide_rubric",
            render(
                &RubricRole,
                &RubricInput {
                    material: out.material.clone()
                }
            )
        );
        let ev = EvidenceInput {
            decisions: out.decisions.clone(),
            context: attrs(),
            environment: BTreeMap::from([
                ("festival".into(), "no".into()),
                ("rec_version".into(), "1".into()),
            ]),
            controls: 6,
            min_controls: 3,
            fitness: BTreeMap::from([("ctr".into(), (0.21, 0.08)), ("cvr".into(), (0.02, 0.1))]),
            contrasts: vec![ContrastIn {
                dimension: "selling_point".into(),
                value: "price".into(),
                objectives: BTreeMap::from([
                    ("ctr".into(), (0.21, 0.08)),
                    ("cvr".into(), (0.02, 0.1)),
                ]),
            }],
            counterexamples: 0,
            agreeing: 2,
            z_min: 1.0,
            conflict_z: 2.0,
        };
        insta::assert_snapshot!("tide_evidence", render(&EvidenceRole, &ev));
        let al = AlignInput {
            guideline: GuidelineView {
                id: "g:price".into(),
                decisions: BTreeMap::from([("selling_point".into(), "price".into())]),
                conditions: BTreeMap::from([("audience".into(), "family".into())]),
                text: "Lead with price for families.".into(),
            },
            dimension: "selling_point".into(),
            value: "price".into(),
            context: attrs(),
        };
        insta::assert_snapshot!("tide_align", render(&AlignRole, &al));
        let wr = WriteInput {
            operation: "narrow".into(),
            decisions: BTreeMap::from([("density".into(), "high".into())]),
            conditions: BTreeMap::from([("audience".into(), "pro".into())]),
            offset: None,
            parents: vec!["- g:dense v1 decide density=high when always".into()],
            evidence: "positive for audience=pro (n=5), negative elsewhere (n=9)".into(),
        };
        insta::assert_snapshot!("tide_write", render(&WriteRole, &wr));
        insta::assert_snapshot!("tide_write_offline", offline_text(&wr));
    }

    #[test]
    fn the_rubric_reads_back_what_the_generator_wrote() {
        let out = GenerateRole.offline(&gen_input()).unwrap();
        let r = RubricRole
            .offline(&RubricInput {
                material: out.material,
            })
            .unwrap();
        assert_eq!(r.decisions, out.decisions);
        assert_eq!(r.decisions["selling_point"], "price");
    }

    #[test]
    fn offline_evidence_refuses_too_few_controls_and_conflicts() {
        let mut ev = EvidenceInput {
            decisions: BTreeMap::from([("cta".into(), "urgent".into())]),
            context: attrs(),
            environment: BTreeMap::new(),
            controls: 2,
            min_controls: 3,
            fitness: BTreeMap::from([("ctr".into(), (0.3, 0.05)), ("cvr".into(), (-0.4, 0.05))]),
            contrasts: vec![ContrastIn {
                dimension: "cta".into(),
                value: "urgent".into(),
                objectives: BTreeMap::from([("ctr".into(), (0.3, 0.05))]),
            }],
            counterexamples: 0,
            agreeing: 0,
            z_min: 1.0,
            conflict_z: 2.0,
        };
        assert!(!offline_evidence(&ev).valid);
        ev.controls = 5;
        let o = offline_evidence(&ev);
        assert!(!o.valid && o.reason.contains("conflict"), "{o:?}");
        ev.fitness.insert("cvr".into(), (0.0, 0.05));
        let o = offline_evidence(&ev);
        assert!(o.valid);
        assert_eq!(o.items[0].direction, Direction::Support);
    }

    #[test]
    fn evidence_items_carry_their_context_and_a_foreign_one_is_refused() {
        let ev = EvidenceInput {
            decisions: BTreeMap::from([("cta".into(), "urgent".into())]),
            context: {
                let mut a = attrs();
                a.insert("bucket".into(), "treated".into());
                a
            },
            environment: BTreeMap::new(),
            controls: 5,
            min_controls: 3,
            fitness: BTreeMap::from([("ctr".into(), (0.3, 0.05))]),
            contrasts: vec![ContrastIn {
                dimension: "cta".into(),
                value: "urgent".into(),
                objectives: BTreeMap::from([("ctr".into(), (0.3, 0.05))]),
            }],
            counterexamples: 0,
            agreeing: 0,
            z_min: 1.0,
            conflict_z: 2.0,
        };
        // Offline: c is the record's context over the condition attributes.
        let o = offline_evidence(&ev);
        assert_eq!(o.items[0].context, attrs());
        // An answer without c gets it; one naming another context is refused.
        let bare = json!({"valid": true, "reason": "r",
            "items": [{"dimension": "cta", "value": "urgent", "direction": "support"}]});
        assert_eq!(
            EvidenceRole.parse(&ev, bare).unwrap().items[0].context,
            attrs()
        );
        let part = json!({"valid": true, "reason": "r",
            "items": [{"dimension": "cta", "value": "urgent", "direction": "support",
                       "context": {"audience": "family"}}]});
        let p = EvidenceRole.parse(&ev, part).unwrap();
        assert_eq!(p.items[0].context.len(), 1);
        let foreign = json!({"valid": true, "reason": "r",
            "items": [{"dimension": "cta", "value": "urgent", "direction": "support",
                       "context": {"audience": "pro"}}]});
        assert!(EvidenceRole.parse(&ev, foreign).is_err());
    }

    #[test]
    fn the_conflict_threshold_is_the_conflict_z_key() {
        let mut ev = EvidenceInput {
            decisions: BTreeMap::from([("cta".into(), "urgent".into())]),
            context: attrs(),
            environment: BTreeMap::new(),
            controls: 5,
            min_controls: 3,
            // z = 6 and z = −3: a conflict at conflict_z = 2, none at 4.
            fitness: BTreeMap::from([("ctr".into(), (0.3, 0.05)), ("cvr".into(), (-0.15, 0.05))]),
            contrasts: vec![ContrastIn {
                dimension: "cta".into(),
                value: "urgent".into(),
                objectives: BTreeMap::from([("ctr".into(), (0.3, 0.05))]),
            }],
            counterexamples: 0,
            agreeing: 0,
            z_min: 1.0,
            conflict_z: 2.0,
        };
        assert!(!offline_evidence(&ev).valid);
        ev.conflict_z = 4.0;
        assert!(offline_evidence(&ev).valid);
    }
}
