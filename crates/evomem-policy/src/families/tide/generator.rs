//! The frozen generator's offline algorithm (role `tide_generate`): it
//! composes a material from the retrieved guidelines and records which
//! guideline decided which dimension (the usage trace G_i of
//! `tide-recommendation-feedback-evolves-memory`, §3).
//!
//! It lives in the policy crate because two callers must run *the same*
//! generator: the generation arena composes every live material with it, and
//! TIDE's counterfactual replay regenerates with it, leaving one memory out.
//!
//! **Composition.** For each dimension (selling point, density, style, call
//! to action) the candidates are the retrieved guidelines that decide it and
//! whose conditions hold for the request, ordered by more conditions first
//! (the most specific guideline), then incumbents before provisional
//! candidates, then more fitness evidence, then id. With no candidate the
//! generator writes its prior (the first option of the dimension).
//!
//! **Temperature.** A replay (`sample: None`, temperature 0) takes up every
//! applicable guideline: each is binding. A live call (`sample: Some(seed)`,
//! temperature > 0) takes up each candidate with probability [`adherence`]
//! of its wording (the keys `adhere_hedged` and `adhere_firm`, carried in
//! [`GenerateInput::adherence`]) (a seeded draw per request, dimension and candidate). The
//! first guideline taken up (in the order above) decides the dimension; with
//! none the generator writes the prior. So a guideline can be retrieved and
//! applicable yet not used live; only the usage trace says so.
//!
//! **Usage trace.** The trace names *every* guideline the generator took up
//! on a dimension, the decisive one first and then those it weighed but
//! overruled by precedence (a broad "always urgent" read next to a
//! family-specific "soft for families"). This is what a generator can
//! report about its own use of memory: which memories went into the
//! material, not which of them was pivotal. Pivotality is what TIDE's
//! leave-one-out counterfactual replay tests (the paper's Used ∧ Align ∧ CF
//! keeps the three apart). An earlier version traced only the decisive
//! guideline; the trace then *was* the leave-one-out answer, and the replay
//! had nothing left to check (`tide[cf=false]` edited as well as `tide`).

use super::guideline::{options, prior, DIMENSIONS};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A retrieved guideline as the generator reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuidelineIn {
    /// Memory id.
    pub id: String,
    /// Its text (its wording sets how often a sampling generator follows it).
    pub text: String,
    /// Decisions: dimension → value.
    pub decisions: BTreeMap<String, String>,
    /// Conditions: attribute → value.
    pub conditions: BTreeMap<String, String>,
    /// Primary fitness evidence (mean), a tie-breaker.
    pub evidence: f64,
    /// An incumbent (promoted) rather than a provisional candidate.
    pub incumbent: bool,
}

/// Input of the generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateInput {
    /// Request id.
    pub request_id: String,
    /// Request text.
    pub request_text: String,
    /// Request attributes (product, audience, channel, placement, campaign stage).
    pub attributes: BTreeMap<String, String>,
    /// Retrieved guidelines, in retrieval order.
    pub guidelines: Vec<GuidelineIn>,
    /// `Some(seed)`: a live, sampled generation; `None`: temperature 0.
    pub sample: Option<u64>,
    /// How often a sampled generation takes up a guideline, by wording.
    #[serde(default)]
    pub adherence: Adherence,
}

/// Take-up probabilities of a sampling generator (keys `adhere_hedged`,
/// `adhere_firm`; defaults 0.05 and 0.8).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Adherence {
    /// A tentatively worded guideline ([`hedged`]).
    pub hedged: f64,
    /// Any other guideline.
    pub firm: f64,
}

impl Default for Adherence {
    fn default() -> Self {
        Self {
            hedged: 0.05,
            firm: 0.8,
        }
    }
}

/// One line of the usage trace: a guideline and the dimension it decided.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UsedGuideline {
    /// Memory id.
    pub id: String,
    /// Dimension it decided.
    pub dimension: String,
}

/// The generator's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateOutput {
    /// The material's text.
    pub material: String,
    /// Its content decisions.
    pub decisions: BTreeMap<String, String>,
    /// The usage trace.
    pub used: Vec<UsedGuideline>,
}

/// Words that make a guideline tentative.
const HEDGES: [&str; 5] = ["maybe", "perhaps", "consider", "might", "optionally"];

/// True when a guideline's text hedges (maybe, perhaps, consider, might,
/// optionally): its wording leaves it tentative.
pub fn hedged(text: &str) -> bool {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| HEDGES.contains(&w))
}

/// Probability that a sampling generator follows a guideline: `a.hedged`
/// when its text hedges, else `a.firm`.
pub fn adherence(text: &str, a: Adherence) -> f64 {
    if hedged(text) {
        a.hedged
    } else {
        a.firm
    }
}

/// The distribution of the live (sampled) generator's value on `dim`,
/// from its sampling law alone: the i-th candidate in precedence order
/// decides with probability `a_i·Π_{j<i}(1 − a_j)` (`a` its take-up
/// probability under `input.adherence`), the prior with `Π_j (1 − a_j)`.
/// Values may repeat (two candidates prescribing the same one); the
/// probabilities sum to 1. This is the ground truth's view of the
/// generator (it reads no draw), which the generation arena uses to define
/// which memories were truly responsible.
pub fn decision_distribution(input: &GenerateInput, dim: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut none_yet = 1.0;
    for g in candidates(input, dim) {
        let a = adherence(&g.text, input.adherence);
        if let Some(v) = g.decisions.get(dim) {
            out.push((v.clone(), none_yet * a));
            none_yet *= 1.0 - a;
        }
    }
    out.push((prior(dim).to_string(), none_yet));
    out
}

/// The generator's fixed phrase for a decision (what the rubric looks for).
pub fn phrase(dim: &str, value: &str) -> &'static str {
    match (dim, value) {
        ("selling_point", "quality") => "Built to last, made with care.",
        ("selling_point", "price") => "Our lowest price of the season.",
        ("selling_point", "usability") => "Ready to use in one minute.",
        ("selling_point", "novelty") => "Brand new, first of its kind.",
        ("density", "low") => "One line says it all.",
        ("density", "high") => "Five specs, three sizes, two colours, full details inside.",
        ("style", "plain") => "Simple and clear.",
        ("style", "vivid") => "Wow, what a feeling!",
        ("cta", "soft") => "Learn more.",
        ("cta", "urgent") => "Buy now, stock is running out!",
        _ => "",
    }
}

/// Read the decisions back from a material's text.
pub fn read_decisions(material: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for d in DIMENSIONS {
        for v in options(d) {
            let p = phrase(d, v);
            if !p.is_empty() && material.contains(p) {
                out.insert(d.to_string(), v.to_string());
            }
        }
    }
    out
}

/// FNV-1a of `s`.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The sampling draw for one guideline on one dimension of one request:
/// keyed by the guideline's id, so that leaving another guideline out does
/// not change it (the arena's true counterfactual uses the same draws).
fn draw(seed: u64, request: &str, dim: usize, guideline: &str) -> f64 {
    let s = seed ^ fnv(request) ^ ((dim as u64) << 32) ^ fnv(guideline).rotate_left(17);
    ChaCha8Rng::seed_from_u64(s).gen::<f64>()
}

/// The candidates for `dim`, in the order the generator considers them.
pub fn candidates<'a>(input: &'a GenerateInput, dim: &str) -> Vec<&'a GuidelineIn> {
    let mut c: Vec<&GuidelineIn> = input
        .guidelines
        .iter()
        .filter(|g| {
            g.decisions
                .get(dim)
                .is_some_and(|v| options(dim).contains(&v.as_str()))
                && g.conditions
                    .iter()
                    .all(|(k, v)| input.attributes.get(k).is_some_and(|a| a == v))
        })
        .collect();
    c.sort_by(|a, b| {
        b.conditions
            .len()
            .cmp(&a.conditions.len())
            .then(b.incumbent.cmp(&a.incumbent))
            .then(b.evidence.total_cmp(&a.evidence))
            .then(a.id.cmp(&b.id))
    });
    c
}

/// Compose a material (see the module docs).
pub fn compose(input: &GenerateInput) -> GenerateOutput {
    let mut decisions = BTreeMap::new();
    let mut used = Vec::new();
    for (di, dim) in DIMENSIONS.iter().enumerate() {
        let cands = candidates(input, dim);
        // The guidelines the generator takes up on this dimension, in
        // precedence order: at temperature 0 every applicable one, live each
        // with the probability its wording earns.
        let followed: Vec<&GuidelineIn> = match input.sample {
            None => cands,
            Some(seed) => cands
                .into_iter()
                .filter(|g| {
                    draw(seed, &input.request_id, di, &g.id) < adherence(&g.text, input.adherence)
                })
                .collect(),
        };
        // The first one decides; the others were weighed and overruled, and
        // the trace names them too (the decisive one first).
        let value = match followed.first() {
            Some(g) => g.decisions.get(*dim).cloned().unwrap_or_default(),
            None => prior(dim).to_string(),
        };
        for g in &followed {
            used.push(UsedGuideline {
                id: g.id.clone(),
                dimension: dim.to_string(),
            });
        }
        decisions.insert(dim.to_string(), value);
    }
    GenerateOutput {
        material: render_material(&input.attributes, &decisions),
        decisions,
        used,
    }
}

/// The material text for `decisions` (the generator's fixed phrases, which
/// the rubric reads back).
pub fn render_material(
    attributes: &BTreeMap<String, String>,
    decisions: &BTreeMap<String, String>,
) -> String {
    let product = attributes
        .get("product")
        .map(String::as_str)
        .unwrap_or("product");
    let audience = attributes
        .get("audience")
        .map(String::as_str)
        .unwrap_or("everyone");
    let body: Vec<&str> = DIMENSIONS
        .iter()
        .map(|d| phrase(d, decisions.get(*d).map(String::as_str).unwrap_or("")))
        .collect();
    format!("The {product}, for {audience}. {}", body.join(" "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn g(id: &str, dim: &str, v: &str, conds: &[(&str, &str)], text: &str) -> GuidelineIn {
        GuidelineIn {
            id: id.into(),
            text: text.into(),
            decisions: BTreeMap::from([(dim.into(), v.into())]),
            conditions: conds
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            evidence: 0.0,
            incumbent: true,
        }
    }

    /// The sampling law the arena's ground truth reads matches what the live
    /// generator does: over 4,000 sampled generations the frequency of each
    /// value on a dimension is within 0.025 of `decision_distribution`.
    #[test]
    fn decision_distribution_is_the_live_generators_law() {
        let input = |sample| GenerateInput {
            request_id: "r".into(),
            request_text: String::new(),
            attributes: BTreeMap::from([("audience".into(), "family".into())]),
            guidelines: vec![
                g("firm", "cta", "urgent", &[("audience", "family")], "Urgent for families."),
                g("tentative", "cta", "urgent", &[], "Maybe urgent."),
                g("sp", "selling_point", "price", &[], "Lead with price."),
            ],
            sample,
            adherence: Adherence { hedged: 0.3, firm: 0.6 },
        };
        for dim in ["cta", "selling_point", "style"] {
            let law = decision_distribution(&input(None), dim);
            assert!((law.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
            let n = 4000;
            let mut seen: BTreeMap<String, f64> = BTreeMap::new();
            for k in 0..n {
                let v = compose(&input(Some(k))).decisions[dim].clone();
                *seen.entry(v).or_default() += 1.0 / n as f64;
            }
            let mut want: BTreeMap<String, f64> = BTreeMap::new();
            for (v, p) in law {
                *want.entry(v).or_default() += p;
            }
            for (v, p) in &want {
                let got = seen.get(v).copied().unwrap_or(0.0);
                assert!((got - p).abs() < 0.025, "{dim}={v}: law {p:.3}, sampled {got:.3}");
            }
        }
        // cta: urgent with 0.6 + 0.4·0.3 = 0.72, the prior with 0.28.
        let law = decision_distribution(&input(None), "cta");
        assert!((law[0].1 + law[1].1 - 0.72).abs() < 1e-12, "{law:?}");
    }

    #[test]
    fn the_most_specific_applicable_guideline_decides_and_every_one_taken_up_is_traced() {
        let input = GenerateInput {
            request_id: "r".into(),
            request_text: String::new(),
            attributes: BTreeMap::from([("audience".into(), "family".into())]),
            guidelines: vec![
                g("broad", "cta", "urgent", &[], "Urgent."),
                g(
                    "narrow",
                    "cta",
                    "soft",
                    &[("audience", "family")],
                    "Soft for families.",
                ),
                g(
                    "other",
                    "style",
                    "vivid",
                    &[("audience", "pro")],
                    "Vivid for pros.",
                ),
            ],
            sample: None,
            adherence: Adherence::default(),
        };
        let out = compose(&input);
        assert_eq!(out.decisions["cta"], "soft");
        assert_eq!(out.decisions["style"], "plain");
        // Both applicable cta guidelines went in (the decisive one first);
        // the pro-only one did not apply.
        assert_eq!(
            out.used,
            vec![
                UsedGuideline {
                    id: "narrow".into(),
                    dimension: "cta".into()
                },
                UsedGuideline {
                    id: "broad".into(),
                    dimension: "cta".into()
                }
            ]
        );
        assert_eq!(read_decisions(&out.material), out.decisions);
    }

    #[test]
    fn a_hedged_guideline_is_seldom_followed_live_but_binding_in_replay() {
        let mut input = GenerateInput {
            request_id: "r".into(),
            request_text: String::new(),
            attributes: BTreeMap::new(),
            guidelines: vec![g(
                "h",
                "selling_point",
                "novelty",
                &[],
                "Maybe consider novelty.",
            )],
            sample: None,
            adherence: Adherence::default(),
        };
        assert_eq!(compose(&input).decisions["selling_point"], "novelty");
        let followed = (0..400)
            .filter(|s| {
                input.sample = Some(*s);
                input.request_id = format!("r{s}");
                compose(&input).decisions["selling_point"] == "novelty"
            })
            .count();
        assert!((5..45).contains(&followed), "{followed}");
    }

    #[test]
    fn adherence_comes_from_the_input_keys() {
        let mut input = GenerateInput {
            request_id: "r".into(),
            request_text: String::new(),
            attributes: BTreeMap::new(),
            guidelines: vec![g(
                "h",
                "selling_point",
                "novelty",
                &[],
                "Maybe consider novelty.",
            )],
            sample: None,
            adherence: Adherence {
                hedged: 1.0,
                firm: 0.0,
            },
        };
        let followed = |input: &mut GenerateInput| {
            (0..50)
                .filter(|s| {
                    input.sample = Some(*s);
                    input.request_id = format!("r{s}");
                    compose(input).decisions["selling_point"] == "novelty"
                })
                .count()
        };
        assert_eq!(followed(&mut input), 50);
        input.guidelines[0].text = "Lead with novelty.".into();
        assert_eq!(followed(&mut input), 0);
    }
}
